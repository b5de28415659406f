//! Start-up: opening the fence table, checking each bucket's scope against the one it recorded,
//! probing each s3 store, and building the gate over them. `fencegate serve` and `fencegate
//! fences rebuild` both start here; the catalog re-runs the scope and store checks for buckets
//! created through the S3 API.

use super::Backends;
use crate::config::{BucketPolicy, Config};
use crate::fence::rocks::RocksFenceStore;
use crate::fence::{Durability, FenceRow, FenceStore, StoreError};
use crate::gate::{BucketEntry, Gate};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Why the gate could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("cannot prepare the fs backend {name} at {path}: {error}; check that the directory is writable")]
    Backend {
        name: String,
        path: String,
        error: std::io::Error,
    },
    #[error("{0}")]
    Gateway(String),
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("bucket {bucket}: its scope is {configured} in the configuration, but the fence table recorded its tokens and tombstones under scope {recorded}; under the new scope they would be forgotten and a stale writer accepted. Set scope (and prefix_segments) back to {recorded}, or, to change it, stop every writer of bucket {bucket}, make sure the tokens they use next are above every token they used before, and start once with --accept-scope-change {bucket}, which records the new scope")]
    ScopeChanged {
        bucket: String,
        recorded: String,
        configured: String,
    },
    #[error("there is no fence table at {0}, and --require-existing-table forbids creating one; point data_dir (or [fence_store] path) at the existing table, or start once without the flag to create it")]
    NoTable(String),
    #[error("bucket {bucket} (s3 backend {backend}): {message}")]
    S3 {
        bucket: String,
        backend: String,
        message: String,
    },
}

/// Opens the fence table and the backends (probing each s3 store) and builds the gate, for
/// `fences rebuild` of `rebuilt`: the bucket whose rows it rebuilds from the objects takes
/// over its place's claim (a lost table's claim, or the bucket's old name, would otherwise
/// refuse it for ever).
pub async fn build_gate(
    config: &Config,
    rebuilt: &str,
) -> Result<(Gate, Arc<dyn FenceStore>), StartupError> {
    let (gate, store, _) = build(config, Backends::taking_over_claim(rebuilt)).await?;
    Ok((gate, store))
}

/// [`build_gate`], also handing back the backends built, for buckets created later.
pub async fn build(
    config: &Config,
    mut backends: Backends,
) -> Result<(Gate, Arc<dyn FenceStore>, Backends), StartupError> {
    let started = Instant::now();
    let path = config.fence_store_path();
    std::fs::create_dir_all(&config.server.data_dir).map_err(|error| StartupError::Backend {
        name: "data_dir".into(),
        path: config.server.data_dir.display().to_string(),
        error,
    })?;
    // After the command line's overrides (--data-dir moves fs roots), and with the buckets
    // created through the S3 API, which check-config cannot see.
    let created =
        super::created_buckets(config).map_err(|e| StartupError::Gateway(e.to_string()))?;
    config.check_namespaces(&created)?;
    let store = crate::fence::instrumented::Instrumented::wrap(open_store(config, &path).await?);
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "fence table open"
    );
    // Before any backend is built: each s3 place's claim names this id.
    backends.set_table_id(crate::fence::table_id(store.as_ref()).await?);
    let mut created_ms = BTreeMap::new();
    for (bucket, policy) in &config.buckets {
        created_ms.insert(
            bucket,
            record_scope(store.as_ref(), config, bucket, policy).await?,
        );
    }

    let mut buckets = BTreeMap::new();
    for (bucket, policy) in &config.buckets {
        let backend = backends
            .for_bucket(config, bucket, policy)
            .await
            .map_err(StartupError::Gateway)?;
        let entry = BucketEntry::new(policy.clone(), backend).created_at(created_ms[bucket]);
        buckets.insert(bucket.clone(), entry);
    }
    let mut gate = Gate::new(store.clone(), buckets)
        .with_idempotency_ttl(Duration::from_secs(config.server.idempotency_ttl_secs))
        .with_upload_limits(crate::gate::UploadLimits {
            expiry: Duration::from_secs(config.server.upload_expiry_secs),
            per_key: config.server.max_uploads_per_key,
            per_bucket: config.server.max_uploads_per_bucket,
        })
        .with_tombstone_bound(config.server.max_tombstones_per_bucket);
    if let Some(etcd) = &config.etcd {
        gate = gate.with_intent_bound(crate::gate::IntentBound {
            ttl: Duration::from_secs(etcd.intent_ttl_secs),
            apply: Duration::from_secs(etcd.store_apply_secs),
            skew: Duration::from_millis(etcd.max_clock_skew_ms),
        });
    }
    Ok((gate, store, backends))
}

/// The fence table: RocksDB at `path`, or the etcd cluster `[fence_store]` names.
async fn open_store(
    config: &Config,
    path: &std::path::Path,
) -> Result<Arc<dyn FenceStore>, StartupError> {
    let Some(etcd) = &config.etcd else {
        let path = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        // RocksDB writes CURRENT when it creates a table, and keeps it for as long as it lives.
        let new = !path.join("CURRENT").exists();
        if new && config.sources.require_existing_table {
            return Err(StartupError::NoTable(path.display().to_string()));
        }
        let store = RocksFenceStore::open(&path)?;
        if new && !config.keys.is_empty() {
            tracing::warn!(path = %path.display(), "created a new, empty fence table: no token is recorded, so the first write of each object is accepted whatever its token. If this instance served before, its data_dir is not where it was (a relative path, an unmounted volume): stop it and point data_dir (or [fence_store] path) at the old table. Start with --require-existing-table to refuse instead");
        }
        tracing::info!(path = %path.display(), estimated_rows = store.estimated_rows(), new, "fence table on rocksdb");
        return Ok(Arc::new(store));
    };
    connect_etcd(etcd).await
}

#[cfg(feature = "cluster")]
async fn connect_etcd(
    etcd: &crate::config::EtcdConfig,
) -> Result<Arc<dyn FenceStore>, StartupError> {
    use crate::fence::etcd::{EtcdFenceStore, EtcdSettings};
    let settings = EtcdSettings {
        endpoints: etcd.endpoints.clone(),
        prefix: etcd.prefix.clone(),
        user: etcd.user.clone(),
        ca_file: etcd.ca_file.clone(),
        identity: etcd.identity.clone(),
        timeout: Duration::from_millis(etcd.timeout_ms),
    };
    let store = EtcdFenceStore::connect(&settings).await.map_err(|e| {
        StartupError::Gateway(format!(
            "cannot reach the fence table on etcd ({}): {e}; check [fence_store] endpoints and that a majority of the members is up (etcdctl --endpoints ... endpoint health)",
            etcd.endpoints.join(", ")
        ))
    })?;
    tracing::info!(endpoints = %etcd.endpoints.join(","), prefix = %etcd.prefix, "fence table on etcd, shared with every instance that names it");
    tracing::info!("cluster mode: its safety rests on bounded intents, which need a store that refuses expired presigned requests (probed at start-up) and clocks within max_clock_skew_ms of the store's (probed at start-up, then watched); docs/design.md, \"Bounded intents\"");
    Ok(Arc::new(store))
}

#[cfg(not(feature = "cluster"))]
async fn connect_etcd(_: &crate::config::EtcdConfig) -> Result<Arc<dyn FenceStore>, StartupError> {
    let what = crate::config::not_built("cluster", "[fence_store] kind = \"etcd\"");
    Err(StartupError::Gateway(format!(
        "{what}; {}",
        crate::config::rebuild_with("cluster")
    )))
}

/// Checks a bucket's scope against the one recorded in the fence table (`policy:<bucket>`),
/// recording it the first time, or when `--accept-scope-change` names the bucket. Scope rows
/// are keyed by the scope kind, so under another kind the recorded tokens and tombstones would
/// silently stop applying.
pub async fn record_scope(
    store: &dyn FenceStore,
    config: &Config,
    bucket: &str,
    policy: &BucketPolicy,
) -> Result<u64, StartupError> {
    let key = format!("policy:{bucket}");
    let configured = Config::scope_kind(policy);
    // Instances sharing a table may start together: one records, the others read it again.
    let mut attempts = 0;
    loop {
        let row = store.get(&key).await?.unwrap_or_default();
        match (&row.scope_kind, row.created_ms) {
            (Some(recorded), Some(created)) if *recorded == configured => return Ok(created),
            _ => {}
        }
        match &row.scope_kind {
            Some(recorded) if *recorded == configured => {}
            Some(recorded) if !config.accept_scope_change.contains(bucket) => {
                return Err(StartupError::ScopeChanged {
                    bucket: bucket.to_string(),
                    recorded: recorded.clone(),
                    configured,
                })
            }
            Some(recorded) => {
                tracing::warn!(bucket, %recorded, %configured, "the bucket's scope changes as --accept-scope-change allows: tokens recorded under the old scope no longer apply");
            }
            None => {}
        }
        // A row recorded before creation dates were kept gets today's.
        let created = row.created_ms.unwrap_or_else(crate::wall_clock::now_ms);
        let row = FenceRow {
            scope_kind: Some(configured.clone()),
            created_ms: Some(created),
            ..row
        };
        match store
            .put(vec![(key.clone(), row)], Durability::Synced)
            .await
        {
            Err(StoreError::Conflict(_)) if attempts < 5 => attempts += 1,
            other => return Ok(other.map(|_| created)?),
        }
    }
}
