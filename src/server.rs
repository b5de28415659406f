//! Wiring: turns a validated [`Config`] into a running fencegate (fence store, backends, gate,
//! native API) and serves it until SIGINT or SIGTERM.

use crate::api::{self, AppState};
use crate::backend::fs::FsBackend;
use crate::backend::Backend;
use crate::config::{BackendConfig, Config};
use crate::fence::rocks::RocksFenceStore;
use crate::fence::StoreError;
use crate::gate::{BucketEntry, Gate};
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
}

/// Opens the fence table and the backends and builds the gate.
pub fn build_gate(config: &Config) -> Result<(Gate, Arc<RocksFenceStore>), StartError> {
    let started = Instant::now();
    let path = config.fence_store_path();
    std::fs::create_dir_all(&config.server.data_dir).map_err(|error| StartError::Backend {
        name: "data_dir".into(),
        path: config.server.data_dir.display().to_string(),
        error,
    })?;
    let store = Arc::new(RocksFenceStore::open(&path)?);
    tracing::info!(path = %path.display(), rows = store.estimated_rows(), took_ms = started.elapsed().as_millis() as u64, "fence table open");

    let mut backends: BTreeMap<String, Arc<dyn Backend>> = BTreeMap::new();
    for (name, backend) in &config.backends {
        match backend {
            BackendConfig::Fs { root } => {
                let root = config.fs_root(root);
                let served: Vec<&str> = config
                    .buckets
                    .iter()
                    .filter(|(_, p)| &p.backend == name)
                    .map(|(b, _)| b.as_str())
                    .collect();
                let fs = FsBackend::open(&root, &served).map_err(|error| StartError::Backend {
                    name: name.clone(),
                    path: root.display().to_string(),
                    error,
                })?;
                backends.insert(name.clone(), Arc::new(fs));
            }
        }
    }
    let buckets = config
        .buckets
        .iter()
        .map(|(name, policy)| {
            let backend = backends[&policy.backend].clone();
            (
                name.clone(),
                BucketEntry {
                    policy: policy.clone(),
                    backend,
                },
            )
        })
        .collect();
    Ok((Gate::new(store.clone(), buckets), store))
}

/// Runs fencegate until a shutdown signal.
pub async fn serve(config: Config) -> Result<(), StartError> {
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .map_err(|e| tracing::warn!(error = %e, "metrics are disabled"))
        .ok();
    let (gate, _store) = build_gate(&config)?;
    for line in config.describe().lines() {
        tracing::info!("{line}");
    }
    let state = AppState {
        gate: Arc::new(gate),
        max_body_bytes: config.server.max_body_bytes,
        body_idle_timeout: Duration::from_secs(config.server.body_idle_timeout_secs),
        metrics,
    };
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|error| StartError::Listen {
            addr: config.listen,
            error,
        })?;
    let addr = listener.local_addr().map_err(StartError::Serve)?;
    tracing::info!(%addr, "fencegate is listening; try: curl http://{addr}/healthz");
    axum::serve(listener, api::router(state))
        .with_graceful_shutdown(shutdown_signal())
        .await
        .map_err(StartError::Serve)?;
    tracing::info!("fencegate stopped");
    Ok(())
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
