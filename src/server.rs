//! Wiring: turns a validated [`Config`] into a running fencegate (fence store, backends, gate,
//! native API) and serves it until SIGINT or SIGTERM.

use crate::api::{self, AppState};
use crate::backend::s3::S3Backend;
use crate::catalog::{Backends, Catalog};
use crate::config::{Config, S3Key};
use crate::fence::rocks::RocksFenceStore;
use crate::fence::StoreError;
use crate::gate::{BucketEntry, Gate, UploadRegistry};
use crate::lease::Leases;
use crate::s3api::{self, KeyTable, S3Gateway};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("{0}")]
    Store(#[from] StoreError),
    #[error("cannot prepare the fs backend {name} at {path}: {error}; check that the directory is writable")]
    Backend {
        name: String,
        path: String,
        error: std::io::Error,
    },
    #[error("cannot listen on {addr}: {error}; pick another address with --listen or stop what holds the port")]
    Listen {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
    #[error("the server failed: {0}")]
    Serve(std::io::Error),
    #[error("{0}")]
    Gateway(String),
    #[error("bucket {bucket} (s3 backend {backend}): {message}")]
    S3 {
        bucket: String,
        backend: String,
        message: String,
    },
}

/// Opens the fence table and the backends (probing each s3 store) and builds the gate.
pub async fn build_gate(config: &Config) -> Result<(Gate, Arc<RocksFenceStore>), StartError> {
    let (gate, store, _) = build(config).await?;
    Ok((gate, store))
}

/// [`build_gate`], also handing back the backends built, for buckets created later.
async fn build(config: &Config) -> Result<(Gate, Arc<RocksFenceStore>, Backends), StartError> {
    let started = Instant::now();
    let path = config.fence_store_path();
    std::fs::create_dir_all(&config.server.data_dir).map_err(|error| StartError::Backend {
        name: "data_dir".into(),
        path: config.server.data_dir.display().to_string(),
        error,
    })?;
    let store = Arc::new(RocksFenceStore::open(&path)?);
    tracing::info!(path = %path.display(), rows = store.estimated_rows(), took_ms = started.elapsed().as_millis() as u64, "fence table open");

    let mut backends = Backends::default();
    let mut buckets = BTreeMap::new();
    for (bucket, policy) in &config.buckets {
        let backend = backends
            .for_bucket(config, bucket, policy)
            .await
            .map_err(StartError::Gateway)?;
        buckets.insert(
            bucket.clone(),
            BucketEntry {
                policy: policy.clone(),
                backend,
            },
        );
    }
    Ok((Gate::new(store.clone(), buckets), store, backends))
}

/// Checks the store bucket exists and runs the conditional-write probe on it.
pub async fn prepare_s3(
    bucket: &str,
    backend_name: &str,
    unsafe_ok: bool,
    backend: &S3Backend,
) -> Result<(), StartError> {
    let fail = |message: String| StartError::S3 {
        bucket: bucket.to_string(),
        backend: backend_name.to_string(),
        message,
    };
    backend
        .check_bucket()
        .await
        .map_err(|e| fail(e.to_string()))?;
    let report = backend
        .probe()
        .await
        .map_err(|e| fail(format!("the conditional-write probe failed: {e}")))?;
    backend.set_conditional_delete(report.conditional_delete);
    // Where the store ignores conditions, the version is read before each such commit instead.
    backend.set_conditional_commits(report.puts_safe(), report.completes_safe());
    if !report.conditional_delete {
        tracing::warn!(bucket, backend = backend_name, "the store ignores If-Match on DeleteObject: deletes check the ETag just before deleting");
    }
    if report.safe() {
        tracing::info!(bucket, backend = backend_name, location = %backend.location(), "s3 store honours conditional writes");
        return Ok(());
    }
    let ignored = report.ignored.join(", ");
    if unsafe_ok {
        for _ in 0..3 {
            tracing::error!(bucket, backend = backend_name, %ignored,
                "UNSAFE: the store ignores conditional writes and unsafe_no_conditional_writes = true; a write made around fencegate while fencegate commits can be silently overwritten");
        }
        return Ok(());
    }
    Err(fail(format!(
        "the store ignores {ignored}, so fencegate cannot guarantee that writes around it are never overwritten; use a store that honours conditional writes (AWS S3, MinIO, Ceph RGW), or set unsafe_no_conditional_writes = true on backend {backend_name} to start anyway"
    )))
}

/// Runs fencegate until a shutdown signal.
pub async fn serve(config: Config) -> Result<(), StartError> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| tracing::warn!(error = %e, "metrics are disabled"))
        .ok();
    let (gate, store, backends) = build(&config).await?;
    for line in config.describe().lines() {
        tracing::info!("{line}");
    }
    let uploads_dir = config.server.data_dir.join("uploads");
    let uploads =
        UploadRegistry::open(uploads_dir.clone()).map_err(|error| StartError::Backend {
            name: "uploads".into(),
            path: uploads_dir.display().to_string(),
            error,
        })?;
    let gate = Arc::new(gate.with_uploads(uploads));
    let catalog = Arc::new(Catalog::new(config.clone(), gate.clone(), backends));
    let leases = Arc::new(Leases::new(
        gate.clone(),
        store,
        Duration::from_secs(config.leases.credential_grace_secs),
    ));
    let created = catalog
        .load()
        .await
        .map_err(|e| StartError::Gateway(e.to_string()))?;
    if created > 0 {
        tracing::info!(created, "serving buckets created through the S3 API");
    }
    let s3 = if config.s3.enabled {
        Some(s3_service(&config, gate.clone(), catalog, leases.clone())?)
    } else {
        None
    };
    let state = AppState {
        gate,
        max_body_bytes: config.server.max_body_bytes,
        body_idle_timeout: Duration::from_secs(config.server.body_idle_timeout_secs),
        metrics,
        s3: if config.s3_listen.is_none() {
            s3.clone()
        } else {
            None
        },
        max_header_bytes: config.server.max_header_bytes,
        leases,
    };
    let listener = bind(config.listen).await?;
    let addr = listener.local_addr().map_err(StartError::Serve)?;
    tracing::info!(%addr, "fencegate is listening; try: curl http://{addr}/healthz");
    let native =
        axum::serve(listener, api::router(state.clone())).with_graceful_shutdown(shutdown_signal());
    match config.s3_listen {
        Some(s3_addr) if s3.is_some() => {
            let s3_listener = bind(s3_addr).await?;
            let s3_addr = s3_listener.local_addr().map_err(StartError::Serve)?;
            tracing::info!(%s3_addr, "the S3 gateway is listening; try: aws --endpoint-url http://{s3_addr} s3 ls");
            let s3_state = AppState { s3, ..state };
            let s3_serve = axum::serve(s3_listener, api::s3_only_router(s3_state))
                .with_graceful_shutdown(shutdown_signal());
            tokio::try_join!(native, s3_serve).map_err(StartError::Serve)?;
        }
        _ => {
            if s3.is_some() {
                tracing::info!("the S3 gateway shares this listener; try: aws --endpoint-url http://{addr} s3 ls");
            }
            native.await.map_err(StartError::Serve)?;
        }
    }
    tracing::info!("fencegate stopped");
    Ok(())
}

async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Listen { addr, error })
}

/// The S3 key used when the config names none (like MinIO's `minioadmin`): the gateway then
/// works out of the box for local use, and says so loudly at start-up.
pub const DEV_KEY: (&str, &str) = ("fencegate", "fencegate-dev-secret");

/// The S3 gateway over `gate`, with the configured keys.
fn s3_service(
    config: &Config,
    gate: Arc<Gate>,
    catalog: Arc<Catalog>,
    leases: Arc<Leases>,
) -> Result<s3s::service::S3Service, StartError> {
    let keys = if config.s3.keys.is_empty() {
        tracing::warn!(
            access_key_id = DEV_KEY.0,
            secret_access_key = DEV_KEY.1,
            "the S3 gateway has no [s3.keys], so it accepts the well-known development key; add [s3.keys.NAME] before exposing it beyond this machine"
        );
        KeyTable::new([S3Key {
            access_key_id: DEV_KEY.0.into(),
            secret_access_key: DEV_KEY.1.into(),
            buckets: vec!["*".into()],
            write: true,
        }])
    } else {
        KeyTable::new(config.s3.keys.values().cloned())
    };
    let keys = keys.with_leases(leases);
    let keys = Arc::new(keys);
    let gateway = S3Gateway {
        gate,
        catalog,
        keys,
        max_body_bytes: config.server.max_body_bytes,
        body_idle_timeout: Duration::from_secs(config.server.body_idle_timeout_secs),
        max_parts: config.s3.max_parts,
        region: config.s3.region.clone(),
    };
    s3api::service(gateway, &config.s3).map_err(StartError::Gateway)
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM can be watched");
    tokio::select! {
        _ = ctrl_c => {},
        _ = term.recv() => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}
