//! Every metric fencegate exports, named once: the families, their kind, labels and HELP text
//! ([`FAMILIES`]), the histogram buckets, the recorder's installation, and the helpers the rest
//! of the code calls, so that no other file spells a family's name.
//!
//! Names follow Prometheus's conventions: base units (`_seconds`, `_bytes`), `_total` on
//! counters, one `fencegate_` prefix. Label values come from fixed lists (surfaces, operation
//! names, outcomes) or from the configuration (bucket and backend names), never from a request
//! (keys, paths, tokens, holders), so the number of series stays bounded whatever clients send.
//!
//! `http.rs` times every request by surface; `backend/instrumented.rs` times every backend
//! call and `fence/instrumented.rs` counts fence-table failures, with the names given here.
//! docs/grafana-dashboard.json and docs/alerts.yaml use these families, and
//! tests/it/ops/metrics.rs checks that every name they use exists. This module names no other
//! of fencegate's: every layer may count through it.

pub mod codes;
pub mod http;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::time::Duration;

pub const REQUESTS: &str = "fencegate_http_requests_total";
pub const REQUEST_DURATION: &str = "fencegate_request_duration_seconds";
pub const REQUESTS_IN_FLIGHT: &str = "fencegate_requests_in_flight";
pub const CONNECTIONS_OPEN: &str = "fencegate_connections_open";
pub const CONNECTIONS_LIMIT: &str = "fencegate_connections_limit";
pub const REQUEST_BODY_BYTES: &str = "fencegate_request_body_bytes_total";
pub const RESPONSE_BODY_BYTES: &str = "fencegate_response_body_bytes_total";
pub const GATE_DECISIONS: &str = "fencegate_gate_decisions_total";
pub const STALE_REJECTIONS: &str = "fencegate_stale_rejections_total";
pub const BYPASS_DETECTED: &str = "fencegate_bypass_detected_total";
pub const STALE_LANDINGS: &str = "fencegate_stale_landings_total";
pub const IDEMPOTENT_REPLAYS: &str = "fencegate_idempotent_replays_total";
pub const FENCE_CONFLICTS: &str = "fencegate_fence_conflicts_total";
pub const COMMIT_WAITS: &str = "fencegate_commit_waits_total";
pub const EXPIRED_REQUESTS: &str = "fencegate_expired_requests_total";
pub const CLOCK_SKEWED: &str = "fencegate_clock_skewed";
pub const CLOCK_AHEAD: &str = "fencegate_clock_ahead_of_store_seconds";
pub const FENCE_SYNCS: &str = "fencegate_fence_syncs_total";
pub const FENCE_GROUP_SIZE: &str = "fencegate_fence_group_size";
pub const FENCE_SYNC_DURATION: &str = "fencegate_fence_sync_duration_seconds";
pub const ETCD_BATCH_PUTS: &str = "fencegate_etcd_batch_puts";
pub const FENCE_STORE_ERRORS: &str = "fencegate_fence_store_errors_total";
pub const BACKEND_DURATION: &str = "fencegate_backend_request_duration_seconds";
pub const BACKEND_ERRORS: &str = "fencegate_backend_errors_total";
pub const STORE_INTEGRITY_FAILURES: &str = "fencegate_store_integrity_failures_total";
pub const LEASE_GRANTS: &str = "fencegate_leases_granted_total";
pub const LEASE_EXPIRIES: &str = "fencegate_lease_expiries_total";
pub const LEASES_HELD: &str = "fencegate_leases_held";
pub const UNVERIFIED_BODY_BYTES: &str = "fencegate_unverified_body_bytes";
pub const UNVERIFIED_BODY_REFUSALS: &str = "fencegate_unverified_body_refusals_total";
pub const UPLOADS_OPEN: &str = "fencegate_multipart_uploads_open";
pub const UPLOAD_BYTES: &str = "fencegate_multipart_upload_bytes";
pub const UPLOADS_EXPIRED: &str = "fencegate_multipart_uploads_expired_total";
pub const UPLOAD_REFUSALS: &str = "fencegate_multipart_upload_refusals_total";
pub const READY: &str = "fencegate_ready";
pub const FENCE_TABLE_ROWS: &str = "fencegate_fence_table_rows";
pub const FENCE_TABLE_TOMBSTONES: &str = "fencegate_fence_table_tombstones";
pub const TOMBSTONES_FOLDED: &str = "fencegate_tombstones_folded_total";
pub const FENCE_TABLE_BYTES: &str = "fencegate_fence_table_disk_bytes";
pub const FENCE_TABLE_COMPACTION: &str = "fencegate_fence_table_pending_compaction_bytes";
pub const DATA_DIR_FREE: &str = "fencegate_data_dir_free_bytes";
pub const DATA_DIR_SIZE: &str = "fencegate_data_dir_size_bytes";
pub const BUILD_INFO: &str = "fencegate_build_info";
pub const FENCE_RESETS: &str = "fencegate_fence_resets_total";
pub const RELOADS: &str = "fencegate_config_reloads_total";
pub const RELOAD_OK: &str = "fencegate_config_last_reload_successful";
pub const RELOAD_AT: &str = "fencegate_config_last_reload_success_timestamp_seconds";
// The process families, as `metrics-process` names them (Prometheus's client conventions).
pub const PROCESS_CPU: &str = "process_cpu_seconds_total";
pub const PROCESS_RSS: &str = "process_resident_memory_bytes";
pub const PROCESS_VIRTUAL: &str = "process_virtual_memory_bytes";
pub const PROCESS_VIRTUAL_MAX: &str = "process_virtual_memory_max_bytes";
pub const PROCESS_OPEN_FDS: &str = "process_open_fds";
pub const PROCESS_MAX_FDS: &str = "process_max_fds";
pub const PROCESS_START: &str = "process_start_time_seconds";
pub const PROCESS_THREADS: &str = "process_threads";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// When a family can appear in `/metrics`: most are there from start-up (zero-valued where
/// nothing happened yet); a few only where their cause can exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    /// From start-up, or from the first request, on every deployment.
    Always,
    /// Once a bucket lives on an s3 backend and the store misbehaves.
    S3Store,
    /// Only with a shared fence table (`[fence_store] kind = "etcd"`).
    Cluster,
    /// Only with a local fence table (RocksDB).
    Local,
}

pub struct Family {
    pub name: &'static str,
    pub kind: Kind,
    pub labels: &'static [&'static str],
    pub help: &'static str,
    pub seen: Seen,
}

const fn family(
    name: &'static str,
    kind: Kind,
    labels: &'static [&'static str],
    help: &'static str,
    seen: Seen,
) -> Family {
    Family {
        name,
        kind,
        labels,
        help,
        seen,
    }
}

use Kind::{Counter, Gauge, Histogram};
use Seen::{Always, Cluster, Local, S3Store};

/// Every family fencegate exports (docs/operations.md, "Metrics", lists them with these words).
pub const FAMILIES: &[Family] = &[
    family(REQUESTS, Counter, &["surface", "operation", "status", "code"],
        "HTTP requests by surface, operation, status (or none: the client left before an answer) and error code (none for an answer without one; other for a code outside fencegate's and S3's lists)", Always),
    family(REQUEST_DURATION, Histogram, &["surface", "operation", "outcome"],
        "HTTP requests by surface (native, leases, s3, admin, health, other), operation and outcome (2xx, 3xx, 4xx, 5xx, or aborted: the client left before the answer was sent), from the request's head to the last byte of its answer", Always),
    family(REQUESTS_IN_FLIGHT, Gauge, &[],
        "HTTP requests received and not yet answered to their last byte", Always),
    family(CONNECTIONS_OPEN, Gauge, &[],
        "Client connections open now, over every listener (a closed one counts until its lingering close ends)", Always),
    family(CONNECTIONS_LIMIT, Gauge, &[],
        "The most client connections open at once: [server] max_connections, or less where the open-file limit needs it; past it, new clients wait", Always),
    family(REQUEST_BODY_BYTES, Counter, &["surface"],
        "Request body bytes received, by surface", Always),
    family(RESPONSE_BODY_BYTES, Counter, &["surface"],
        "Response body bytes sent, by surface", Always),
    family(GATE_DECISIONS, Counter, &["operation", "outcome", "bucket"],
        "Writes, deletes and multipart steps decided by the gate, by operation, outcome (accepted, stale, bypass, precondition, busy, rejected, failed) and bucket", Always),
    family(STALE_REJECTIONS, Counter, &["bucket"],
        "Writes and deletes refused because their fencing token was below (or, for strictly increasing buckets, equal to) the scope's highest, or named another lock's scope", Always),
    family(BYPASS_DETECTED, Counter, &["bucket"],
        "Objects found changed on the backend behind fencegate's back at a commit (refused, or adopted under on_bypass = adopt)", Always),
    family(TOMBSTONES_FOLDED, Counter, &["bucket"],
        "Tombstones folded into their bucket's floor past [server] max_tombstones_per_bucket (each row gone, its token kept by the floor)", Always),
    family(STALE_LANDINGS, Counter, &["bucket"],
        "Commits whose store request landed after a newer token's (the store applied an expired request): an integrity failure to investigate", Always),
    family(IDEMPOTENT_REPLAYS, Counter, &["bucket"],
        "Retries answered from an earlier request with the same Idempotency-Key", Always),
    family(FENCE_CONFLICTS, Counter, &[],
        "Decisions taken again because another instance changed a fence row in between (shared fence table)", Always),
    family(COMMIT_WAITS, Counter, &[],
        "Decisions taken again because another commit of the object was still in progress", Always),
    family(EXPIRED_REQUESTS, Counter, &[],
        "Store requests refused because they reached the store after their intent's deadline (cluster mode)", Always),
    family(CLOCK_SKEWED, Gauge, &[],
        "1 while this instance's clock runs further ahead of a store's than max_clock_skew_ms (cluster mode)", Cluster),
    family(CLOCK_AHEAD, Gauge, &[],
        "How far this instance's clock runs ahead of the store's, as last measured (negative: behind), in seconds (cluster mode)", Cluster),
    family(FENCE_SYNCS, Counter, &[],
        "Durable writes (WAL fsyncs on RocksDB, transactions on etcd) of the fence table", Always),
    family(FENCE_GROUP_SIZE, Histogram, &[],
        "Synced puts that shared one RocksDB WAL fsync (group commit)", Always),
    family(FENCE_SYNC_DURATION, Histogram, &[],
        "Time one durable write of the fence table took (a RocksDB WAL fsync, an etcd transaction)", Always),
    family(ETCD_BATCH_PUTS, Histogram, &[],
        "Puts sent to etcd in one transaction", Cluster),
    family(FENCE_STORE_ERRORS, Counter, &["operation"],
        "Fence-table reads and writes that failed (not counting cluster-mode conflicts, which are retried)", Always),
    family(BACKEND_DURATION, Histogram, &["backend", "operation", "outcome"],
        "Backend calls by backend name, operation and outcome (ok, conflict, rejected, error); stage includes reading the client's body, get ends when the body starts to stream", Always),
    family(BACKEND_ERRORS, Counter, &["backend", "operation", "kind"],
        "Backend calls that failed, by kind (unreachable, timeout, throttled, failing, corrupt, kept_different_bytes, expired)", Always),
    family(STORE_INTEGRITY_FAILURES, Counter, &["operation"],
        "Store answers carrying the digest of other bytes than fencegate sent (s3 backend)", S3Store),
    family(LEASE_GRANTS, Counter, &[],
        "Leases granted (each grant mints a new token)", Always),
    family(LEASE_EXPIRIES, Counter, &[],
        "Leases that reached their TTL without being renewed or released (on a shared fence table, as this instance observed them)", Always),
    family(LEASES_HELD, Gauge, &[],
        "Leases held now (live, not expired)", Always),
    family(UNVERIFIED_BODY_BYTES, Gauge, &[],
        "Bytes of request bodies held now before their signature can be checked (native API bodies signed over their own hash), out of [server] max_unverified_body_bytes", Always),
    family(UNVERIFIED_BODY_REFUSALS, Counter, &[],
        "Requests refused with 503 SlowDown because bodies awaiting their signature check held all of [server] max_unverified_body_bytes", Always),
    family(UPLOADS_OPEN, Gauge, &[],
        "Multipart uploads created through the S3 API and not yet completed, aborted or expired", Always),
    family(UPLOAD_BYTES, Gauge, &[],
        "Bytes of the parts those uploads hold (each part once, the last one sent under its number)", Always),
    family(UPLOADS_EXPIRED, Counter, &[],
        "Incomplete multipart uploads aborted because they were older than [server] upload_expiry_secs", Always),
    family(UPLOAD_REFUSALS, Counter, &["bound"],
        "CreateMultipartUpload refused with 400 TooManyUploads, by the bound reached (per_key, per_bucket)", Always),
    family(READY, Gauge, &["check"],
        "1 when the readiness check passes (fence_table, clock, bucket:NAME), else 0; rechecked every 10 s and at every GET /readyz", Always),
    family(FENCE_TABLE_ROWS, Gauge, &[],
        "Rows of the local fence table, each once however often written, counted by a scan every 10 minutes", Local),
    family(FENCE_TABLE_TOMBSTONES, Gauge, &[],
        "Rows of the local fence table that record a deleted object, counted by a scan every 10 minutes", Local),
    family(FENCE_TABLE_BYTES, Gauge, &[],
        "Bytes the local fence table's files take on disk, every 15 s", Local),
    family(FENCE_TABLE_COMPACTION, Gauge, &[],
        "Bytes RocksDB's compactions still have to rewrite (it slows writes as this grows), every 15 s", Local),
    family(DATA_DIR_FREE, Gauge, &[],
        "Bytes free for fencegate on the file system of [server] data_dir, every 15 s", Always),
    family(DATA_DIR_SIZE, Gauge, &[],
        "Size in bytes of the file system of [server] data_dir", Always),
    family(BUILD_INFO, Gauge, &["version"],
        "Always 1; its version label is the running fencegate's", Always),
    family(FENCE_RESETS, Counter, &[],
        "Fences lowered by an admin (POST /admin/fences/...?reset_to=N): a stale holder's token may be accepted again", Always),
    family(RELOADS, Counter, &["outcome"],
        "Configuration reloads (SIGHUP or POST /admin/reload), by outcome (applied, refused: the configuration in use stays)", Always),
    family(RELOAD_OK, Gauge, &[],
        "1 if the last configuration reload (or the start) applied, 0 if it was refused", Always),
    family(RELOAD_AT, Gauge, &[],
        "When the configuration in use was last loaded (the start, or the last reload that applied), in Unix seconds", Always),
    family(PROCESS_CPU, Counter, &[],
        "User and system CPU time the process has used, in whole seconds", Always),
    family(PROCESS_RSS, Gauge, &[], "Resident memory of the process, in bytes", Always),
    family(PROCESS_VIRTUAL, Gauge, &[], "Virtual memory of the process, in bytes", Always),
    family(PROCESS_VIRTUAL_MAX, Gauge, &[],
        "The most virtual memory the process may take, in bytes (0: no limit)", Always),
    family(PROCESS_OPEN_FDS, Gauge, &[], "File descriptors the process has open", Always),
    family(PROCESS_MAX_FDS, Gauge, &[],
        "The most file descriptors the process may open (its soft limit)", Always),
    family(PROCESS_START, Gauge, &[],
        "When the process started, in seconds since the Unix epoch (a change is a restart)", Always),
    family(PROCESS_THREADS, Gauge, &[], "Operating-system threads of the process", Always),
];

/// Latency buckets, in seconds: a cached read answers in well under a millisecond, a commit
/// on a slow store or a waited-for lease takes seconds.
const SECONDS_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0,
];

/// Buckets for the histograms that count things (puts per fsync or transaction).
const COUNT_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// How often the exporter drains its histograms when nobody scrapes, so they never grow.
const UPKEEP: Duration = Duration::from_secs(5);

/// Installs the Prometheus recorder (histograms as real histograms, every family described)
/// and starts its upkeep, until `shutdown`. `None` when a recorder is installed already (logged).
pub fn install(shutdown: &crate::shutdown::Shutdown) -> Option<PrometheusHandle> {
    let builder = PrometheusBuilder::new()
        .set_buckets(SECONDS_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(FENCE_GROUP_SIZE.into()), COUNT_BUCKETS)
        })
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(ETCD_BATCH_PUTS.into()), COUNT_BUCKETS)
        });
    let handle = match builder.and_then(|b| b.install_recorder()) {
        Ok(h) => h,
        Err(e) => {
            tracing::warn!(error = %e, "metrics are disabled");
            return None;
        }
    };
    for f in FAMILIES {
        match f.kind {
            Counter => metrics::describe_counter!(f.name, f.help),
            Gauge => metrics::describe_gauge!(f.name, f.help),
            Histogram => metrics::describe_histogram!(f.name, f.help),
        }
    }
    metrics::gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    // Zero-valued from the start, so that rate() and increase() see the first event.
    for name in [
        FENCE_CONFLICTS,
        COMMIT_WAITS,
        EXPIRED_REQUESTS,
        FENCE_SYNCS,
        LEASE_GRANTS,
        LEASE_EXPIRIES,
        UNVERIFIED_BODY_REFUSALS,
        UPLOADS_EXPIRED,
        FENCE_RESETS,
    ] {
        metrics::counter!(name).absolute(0);
    }
    for outcome in ["applied", "refused"] {
        metrics::counter!(RELOADS, "outcome" => outcome).absolute(0);
    }
    reload_outcome(true);
    for bound in ["per_key", "per_bucket"] {
        metrics::counter!(UPLOAD_REFUSALS, "bound" => bound).absolute(0);
    }
    for operation in ["get", "put", "scan"] {
        metrics::counter!(FENCE_STORE_ERRORS, "operation" => operation).absolute(0);
    }
    metrics::gauge!(REQUESTS_IN_FLIGHT).set(0.0);
    metrics::gauge!(CONNECTIONS_OPEN).set(0.0);
    metrics::gauge!(LEASES_HELD).set(0.0);
    metrics::gauge!(UNVERIFIED_BODY_BYTES).set(0.0);
    let upkeep = handle.clone();
    shutdown.spawn_background(async move {
        loop {
            tokio::time::sleep(UPKEEP).await;
            upkeep.run_upkeep();
        }
    });
    Some(handle)
}

/// One client connection, counted in `fencegate_connections_open` while it lives.
pub struct OpenConnection(());

impl OpenConnection {
    #[allow(clippy::new_without_default)]
    pub fn new() -> OpenConnection {
        metrics::gauge!(CONNECTIONS_OPEN).increment(1.0);
        OpenConnection(())
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        metrics::gauge!(CONNECTIONS_OPEN).decrement(1.0);
    }
}

/// Reads the process's figures (`process_*`), before each scrape.
pub fn collect_process() {
    static COLLECTOR: std::sync::OnceLock<metrics_process::Collector> = std::sync::OnceLock::new();
    COLLECTOR
        .get_or_init(metrics_process::Collector::default)
        .collect();
}

/// The local fence table's size on disk, as its engine reports it.
pub fn fence_table_usage(bytes_on_disk: u64, pending_compaction_bytes: u64) {
    metrics::gauge!(FENCE_TABLE_BYTES).set(bytes_on_disk as f64);
    metrics::gauge!(FENCE_TABLE_COMPACTION).set(pending_compaction_bytes as f64);
}

/// The local fence table's rows, as its last scan counted them (`u64::MAX`: not yet).
static COUNTED_ROWS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);

/// The local fence table's rows and tombstones, as its last scan counted them.
pub fn fence_table_census(rows: u64, tombstones: u64) {
    COUNTED_ROWS.store(rows, std::sync::atomic::Ordering::Relaxed);
    metrics::gauge!(FENCE_TABLE_ROWS).set(rows as f64);
    metrics::gauge!(FENCE_TABLE_TOMBSTONES).set(tombstones as f64);
}

/// The rows the last scan of the local fence table counted, for `fencegate status`.
pub fn fence_table_counted_rows() -> Option<u64> {
    match COUNTED_ROWS.load(std::sync::atomic::Ordering::Relaxed) {
        u64::MAX => None,
        rows => Some(rows),
    }
}

/// The space left on the data directory's file system, and its size.
pub fn data_dir_space(free: u64, size: u64) {
    metrics::gauge!(DATA_DIR_FREE).set(free as f64);
    metrics::gauge!(DATA_DIR_SIZE).set(size as f64);
}

/// The connection budget every listener shares.
pub fn connection_limit(connections: usize) {
    metrics::gauge!(CONNECTIONS_LIMIT).set(connections as f64);
}

/// A fence lowered by an admin.
pub fn fence_reset() {
    metrics::counter!(FENCE_RESETS).increment(1);
}

/// A configuration reload's outcome (and, at start-up, the first load's).
pub fn reload_outcome(applied: bool) {
    metrics::gauge!(RELOAD_OK).set(if applied { 1.0 } else { 0.0 });
    if applied {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        metrics::gauge!(RELOAD_AT).set(now.as_secs_f64().floor());
    }
}

/// One configuration reload, applied or refused.
pub fn reloaded(applied: bool) {
    let outcome = if applied { "applied" } else { "refused" };
    metrics::counter!(RELOADS, "outcome" => outcome).increment(1);
    reload_outcome(applied);
}

/// The per-bucket counters at zero, so that an alert on their increase fires at the first one.
pub fn register_bucket(bucket: &str) {
    for name in [
        STALE_REJECTIONS,
        BYPASS_DETECTED,
        STALE_LANDINGS,
        IDEMPOTENT_REPLAYS,
        TOMBSTONES_FOLDED,
    ] {
        metrics::counter!(name, "bucket" => bucket.to_string()).increment(0);
    }
}

/// The gate's answer to one write, delete or multipart step.
pub fn gate_decision(operation: &'static str, bucket: &str, outcome: &'static str) {
    metrics::counter!(GATE_DECISIONS, "operation" => operation, "outcome" => outcome, "bucket" => bucket.to_string()).increment(1);
    if outcome == "stale" {
        metrics::counter!(STALE_REJECTIONS, "bucket" => bucket.to_string()).increment(1);
    }
}

pub fn bypass_detected(bucket: &str) {
    metrics::counter!(BYPASS_DETECTED, "bucket" => bucket.to_string()).increment(1);
}

pub fn tombstones_folded(bucket: &str, count: u64) {
    metrics::counter!(TOMBSTONES_FOLDED, "bucket" => bucket.to_string()).increment(count);
}

pub fn stale_landing(bucket: &str) {
    metrics::counter!(STALE_LANDINGS, "bucket" => bucket.to_string()).increment(1);
}

pub fn idempotent_replay(bucket: &str) {
    metrics::counter!(IDEMPOTENT_REPLAYS, "bucket" => bucket.to_string()).increment(1);
}

pub fn fence_conflict() {
    metrics::counter!(FENCE_CONFLICTS).increment(1);
}

pub fn commit_wait() {
    metrics::counter!(COMMIT_WAITS).increment(1);
}

pub fn expired_request() {
    metrics::counter!(EXPIRED_REQUESTS).increment(1);
}

pub fn clock_skewed(skewed: bool) {
    metrics::gauge!(CLOCK_SKEWED).set(if skewed { 1.0 } else { 0.0 });
}

/// `ahead_ms`: how far this instance's clock runs ahead of the store's, in milliseconds.
pub fn clock_ahead_ms(ahead_ms: f64) {
    metrics::gauge!(CLOCK_AHEAD).set(ahead_ms / 1000.0);
}

/// One durable write of the fence table: `puts` requests rode on it, and it took `took`.
pub fn fence_sync(puts: usize, took: Duration, group_histogram: &'static str) {
    metrics::counter!(FENCE_SYNCS).increment(1);
    metrics::histogram!(group_histogram).record(puts as f64);
    metrics::histogram!(FENCE_SYNC_DURATION).record(took.as_secs_f64());
}

/// The store-integrity series at zero, for an s3 backend: each is critical, and may count once.
pub fn register_store_integrity() {
    for operation in ["PutObject", "UploadPart"] {
        metrics::counter!(STORE_INTEGRITY_FAILURES, "operation" => operation).increment(0);
    }
}

pub fn store_integrity_failure(operation: &str) {
    metrics::counter!(STORE_INTEGRITY_FAILURES, "operation" => operation.to_string()).increment(1);
}

pub fn lease_granted() {
    metrics::counter!(LEASE_GRANTS).increment(1);
}

pub fn leases_expired(count: u64) {
    metrics::counter!(LEASE_EXPIRIES).increment(count);
}

pub fn leases_held(count: usize) {
    metrics::gauge!(LEASES_HELD).set(count as f64);
}

/// `bytes` more (or, negative, fewer) of bodies held before their signature is checked.
pub fn unverified_body_bytes(bytes: f64) {
    metrics::gauge!(UNVERIFIED_BODY_BYTES).increment(bytes);
}

/// The multipart uploads open now, and the bytes their parts hold.
pub fn uploads_open(count: usize, bytes: u64) {
    metrics::gauge!(UPLOADS_OPEN).set(count as f64);
    metrics::gauge!(UPLOAD_BYTES).set(bytes as f64);
}

pub fn upload_expired() {
    metrics::counter!(UPLOADS_EXPIRED).increment(1);
}

/// `bound`: `per_key` or `per_bucket`.
pub fn upload_refused(bound: &'static str) {
    metrics::counter!(UPLOAD_REFUSALS, "bound" => bound).increment(1);
}

pub fn unverified_body_refused() {
    metrics::counter!(UNVERIFIED_BODY_REFUSALS).increment(1);
}

pub fn ready_check(check: &str, ok: bool) {
    metrics::gauge!(READY, "check" => check.to_string()).set(if ok { 1.0 } else { 0.0 });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prometheus's naming rules, for every family: the prefix, `_total` on counters and only
    /// there, base units, HELP text, and no family named twice.
    #[test]
    fn families_follow_the_naming_rules() {
        let mut seen = std::collections::HashSet::new();
        for f in FAMILIES {
            // The process families keep the names every Prometheus client library gives them.
            assert!(
                f.name.starts_with("fencegate_") || f.name.starts_with("process_"),
                "{}",
                f.name
            );
            assert!(seen.insert(f.name), "{} is listed twice", f.name);
            assert_eq!(f.kind == Counter, f.name.ends_with("_total"), "{}", f.name);
            for unit in [
                "_ms",
                "_millis",
                "_milliseconds",
                "_kb",
                "_mib",
                "_bytes_count",
            ] {
                assert!(!f.name.contains(unit), "{} is not in a base unit", f.name);
            }
            assert!(f.help.len() > 20 && !f.help.contains('\n'), "{}", f.name);
            for label in f.labels {
                assert!(
                    !["key", "path", "token", "holder", "scope"].contains(label),
                    "{} has an unbounded label {label}",
                    f.name
                );
            }
        }
        // Histograms of durations are in seconds; the others count things.
        for f in FAMILIES.iter().filter(|f| f.kind == Histogram) {
            assert!(
                f.name.ends_with("_seconds")
                    || [FENCE_GROUP_SIZE, ETCD_BATCH_PUTS].contains(&f.name),
                "{}",
                f.name
            );
        }
    }
}
