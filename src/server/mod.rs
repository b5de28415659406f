//! Wiring: turns a validated [`Config`] into a running fencegate (fence store, backends, gate,
//! native API, S3 gateway, admin surface) and serves it until SIGINT or SIGTERM. `listen.rs`
//! holds the accept loop every listener runs, `tls.rs` the certificates it offers.

mod listen;
pub mod reload;
mod stall;
pub mod tls;

pub use stall::{bound_bodies, StalledBody};

use crate::api::{self, AppState};
use crate::auth::KeyTable;
use crate::backend::s3::S3Backend;
use crate::catalog::{Backends, Catalog};
use crate::config::{BucketPolicy, Config, S3BackendConfig};
use crate::fence::etcd::{EtcdFenceStore, EtcdSettings};
use crate::fence::rocks::RocksFenceStore;
use crate::fence::{Durability, FenceRow, FenceStore, StoreError};
use crate::gate::{BucketEntry, Gate, Upload, UploadRegistry};
use crate::lease::Leases;
use crate::s3api::{self, S3Gateway};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

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
    #[error("no keys are configured, so fencegate is in development mode, where anyone may do anything; it therefore listens on loopback only, and {addr} is not loopback. Add a key to the configuration ([keys.NAME] with access_key_id, secret_access_key_file and bucket permissions; README, \"Security\"), or listen on 127.0.0.1. To expose development mode anyway, set [server] protected_mode = false")]
    Unprotected { addr: std::net::SocketAddr },
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
    #[error("{0}")]
    Tls(#[from] tls::TlsError),
    #[error("bucket {bucket}: its scope is {configured} in the configuration, but the fence table recorded its tokens and tombstones under scope {recorded}; under the new scope they would be forgotten and a stale writer accepted. Set scope (and prefix_segments) back to {recorded}, or, to change it, stop every writer of bucket {bucket}, make sure the tokens they use next are above every token they used before, and start once with --accept-scope-change {bucket}, which records the new scope")]
    ScopeChanged {
        bucket: String,
        recorded: String,
        configured: String,
    },
    #[error("bucket {bucket} (s3 backend {backend}): {message}")]
    S3 {
        bucket: String,
        backend: String,
        message: String,
    },
}

/// Opens the fence table and the backends (probing each s3 store) and builds the gate.
pub async fn build_gate(config: &Config) -> Result<(Gate, Arc<dyn FenceStore>), StartError> {
    let (gate, store, _) = build(config, Backends::default()).await?;
    Ok((gate, store))
}

/// [`build_gate`], also handing back the backends built, for buckets created later.
async fn build(
    config: &Config,
    mut backends: Backends,
) -> Result<(Gate, Arc<dyn FenceStore>, Backends), StartError> {
    let started = Instant::now();
    let path = config.fence_store_path();
    std::fs::create_dir_all(&config.server.data_dir).map_err(|error| StartError::Backend {
        name: "data_dir".into(),
        path: config.server.data_dir.display().to_string(),
        error,
    })?;
    // After the command line's overrides (--data-dir moves fs roots), and with the buckets
    // created through the S3 API, which check-config cannot see.
    let created =
        crate::catalog::created_buckets(config).map_err(|e| StartError::Gateway(e.to_string()))?;
    config.check_namespaces(&created)?;
    let store = crate::metrics::fence::Instrumented::wrap(open_store(config, &path).await?);
    tracing::info!(
        took_ms = started.elapsed().as_millis() as u64,
        "fence table open"
    );
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
            .map_err(StartError::Gateway)?;
        let entry = BucketEntry::new(policy.clone(), backend).created_at(created_ms[bucket]);
        buckets.insert(bucket.clone(), entry);
    }
    let mut gate = Gate::new(store.clone(), buckets)
        .with_idempotency_ttl(Duration::from_secs(config.server.idempotency_ttl_secs));
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
) -> Result<Arc<dyn FenceStore>, StartError> {
    let Some(etcd) = &config.etcd else {
        let store = RocksFenceStore::open(path)?;
        tracing::info!(path = %path.display(), rows = store.estimated_rows(), "fence table on rocksdb");
        return Ok(Arc::new(store));
    };
    let settings = EtcdSettings {
        endpoints: etcd.endpoints.clone(),
        prefix: etcd.prefix.clone(),
        user: etcd.user.clone(),
        ca_file: etcd.ca_file.clone(),
        identity: etcd.identity.clone(),
        timeout: Duration::from_millis(etcd.timeout_ms),
    };
    let store = EtcdFenceStore::connect(&settings).await.map_err(|e| {
        StartError::Gateway(format!(
            "cannot reach the fence table on etcd ({}): {e}; check [fence_store] endpoints and that a majority of the members is up (etcdctl --endpoints ... endpoint health)",
            etcd.endpoints.join(", ")
        ))
    })?;
    tracing::info!(endpoints = %etcd.endpoints.join(","), prefix = %etcd.prefix, "fence table on etcd, shared with every instance that names it");
    tracing::info!("cluster mode: its safety rests on bounded intents, which need a store that refuses expired presigned requests (probed at start-up) and clocks within max_clock_skew_ms of the store's (probed at start-up, then watched); docs/design.md, \"Bounded intents\"");
    Ok(Arc::new(store))
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
) -> Result<u64, StartError> {
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
                return Err(StartError::ScopeChanged {
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

/// Checks the store bucket exists and runs the conditional-write probe on it.
pub async fn prepare_s3(
    bucket: &str,
    backend_name: &str,
    cfg: &S3BackendConfig,
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
    backend.set_etags_are_md5(report.etags_are_md5);
    if !report.etags_are_md5 {
        tracing::warn!(bucket, backend = backend_name, "the store's ETags are not MD5s of the bytes (SSE-KMS?): fencegate cannot compare them with what it sent; the store's own Content-MD5 check still applies");
    }
    // Where the store ignores conditions, the version is read before each such commit instead.
    backend.set_conditional_commits(report.puts_safe(), report.completes_safe());
    let mut ignored: Vec<&str> = report.ignored.clone();
    if !report.conditional_delete {
        ignored.push("If-Match on DeleteObject");
    }
    if ignored.is_empty() {
        tracing::info!(bucket, backend = backend_name, location = %backend.location(), "s3 store honours conditional writes and deletes");
        return Ok(());
    }
    // Each ignored condition needs its own opt-in: they lose different guarantees.
    let mut missing = Vec::new();
    if !report.safe() {
        if cfg.unsafe_no_conditional_writes {
            for _ in 0..3 {
                tracing::error!(bucket, backend = backend_name, ignored = %report.ignored.join(", "),
                    "UNSAFE: the store ignores conditional writes and unsafe_no_conditional_writes = true; a write made around fencegate while fencegate commits can be silently overwritten");
            }
        } else {
            missing.push(format!(
                "the store ignores {}, so fencegate cannot guarantee that writes around it are never overwritten; use a store that honours conditional writes (AWS S3, MinIO, Ceph RGW), or set unsafe_no_conditional_writes = true on backend {backend_name} to start anyway",
                report.ignored.join(", ")
            ));
        }
    }
    if !report.conditional_delete {
        if cfg.unsafe_unconditional_deletes {
            for _ in 0..3 {
                tracing::error!(bucket, backend = backend_name,
                    "UNSAFE: the store ignores If-Match on DeleteObject and unsafe_unconditional_deletes = true; deletes check the ETag and then delete unconditionally, so a delete that times out and lands late can remove an object a newer token wrote");
            }
        } else {
            missing.push(format!(
                "the store ignores If-Match on DeleteObject, so a delete is a check followed by an unconditional DELETE, and a DELETE that times out and lands late can remove an object a newer token wrote in between; use a store that honours If-Match on DeleteObject, or set unsafe_unconditional_deletes = true on backend {backend_name} to start anyway"
            ));
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(fail(missing.join("; and ")))
    }
}

/// Protected mode: without keys, only loopback listeners (Redis's protected mode), unless the
/// operator lifted it, which is logged loudly.
pub fn check_protected(config: &Config) -> Result<(), StartError> {
    if !config.keys.is_empty() {
        return Ok(());
    }
    let mut listeners = vec![Some(config.listen), config.s3_listen];
    // A bearer token closes the admin surface by itself.
    if config.admin_token.is_none() {
        listeners.push(config.admin_listen);
    }
    let exposed = listeners
        .into_iter()
        .flatten()
        .find(|a| !a.ip().is_loopback());
    match exposed {
        None => {
            tracing::warn!(
                access_key_id = DEV_KEY.0,
                secret_access_key = DEV_KEY.1,
                "development mode: no [keys] are configured, so anonymous requests and the development key may do anything; listening on loopback only"
            );
            Ok(())
        }
        Some(addr) if !config.server.protected_mode => {
            for _ in 0..3 {
                tracing::error!(%addr, "UNPROTECTED: development mode (no [keys]) on a non-loopback address because [server] protected_mode = false; anyone who reaches this port may write, delete, advance fences and take leases");
            }
            Ok(())
        }
        Some(addr) => Err(StartError::Unprotected { addr }),
    }
}

/// Runs fencegate until a shutdown signal.
pub async fn serve(config: Config) -> Result<(), StartError> {
    check_protected(&config)?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    let metrics = crate::metrics::install();
    // The registry first: the uploads clients started stay, other store uploads are swept.
    let uploads_dir = config.server.data_dir.join("uploads");
    let uploads =
        UploadRegistry::open(uploads_dir.clone()).map_err(|error| StartError::Backend {
            name: "uploads".into(),
            path: uploads_dir.display().to_string(),
            error,
        })?;
    let registered = registered_handles(&uploads_dir);
    let (gate, store, backends) = build(&config, Backends::for_startup(registered)).await?;
    for line in config.describe().lines() {
        tracing::info!("{line}");
    }
    let gate = Arc::new(gate.with_uploads(uploads));
    // Cluster mode: the clock checked at start-up is checked again as it runs.
    gate.watch_clocks(Duration::from_secs(10));
    for bucket in config.buckets.keys() {
        crate::metrics::register_bucket(bucket);
    }
    crate::health::watch(gate.clone());
    let catalog = Arc::new(Catalog::new(
        config.clone(),
        gate.clone(),
        store.clone(),
        backends,
    ));
    let leases = Arc::new(Leases::new(
        gate.clone(),
        store,
        Duration::from_secs(config.leases.credential_grace_secs),
    ));
    leases.watch();
    let created = catalog
        .load()
        .await
        .map_err(|e| StartError::Gateway(e.to_string()))?;
    if created > 0 {
        tracing::info!(created, "serving buckets created through the S3 API");
    }
    let keys = Arc::new(
        KeyTable::new(config.keys.values().cloned())
            .with_leases(leases.clone(), gate.clone())
            .with_unverified_budget(config.server.max_unverified_body_bytes),
    );
    let tls = match &config.server.tls {
        Some(files) => Some(tls::Tls::load(&files.cert_file, &files.key_file)?),
        None => None,
    };
    let admin_auth = Arc::new(crate::auth::admin::AdminAuth::new(
        keys.clone(),
        config.admin_token.clone(),
    ));
    let reloader = Arc::new(reload::Reloader::new(
        config.clone(),
        keys.clone(),
        admin_auth.clone(),
        gate.clone(),
        tls.clone(),
    ));
    // Always watched: SIGHUP's default action ends the process, and `systemctl reload` or a
    // logrotate hook sends it.
    tokio::spawn(reload_on_sighup(reloader.clone()));
    let s3 = if config.s3.enabled {
        Some(s3_service(&config, gate.clone(), catalog, keys.clone())?)
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
        keys: keys.clone(),
        reloader,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let admin_routes = api::admin::routes(state.clone(), admin_auth);
    // Every listener is bound before any is served, so a taken port fails the start.
    let listener = bind(config.listen).await?;
    let addr = listener.local_addr().map_err(StartError::Serve)?;
    let admin_listener = match config.admin_listen {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let s3_listener = match config.s3_listen {
        Some(a) if s3.is_some() => Some(bind(a).await?),
        _ => None,
    };
    let limits = listen::Limits {
        connections: Arc::new(Semaphore::new(connection_budget(
            config.server.max_connections,
        ))),
        grace: Duration::from_secs(config.server.shutdown_grace_secs),
        read_buffer: listen::Limits::read_buffer_for(config.server.max_header_bytes),
    };
    let mut servers = tokio::task::JoinSet::new();
    let native_router = match admin_listener {
        Some(l) => {
            let admin_addr = l.local_addr().map_err(StartError::Serve)?;
            tracing::info!(%admin_addr, "the admin surface is listening; try: curl {scheme}://{admin_addr}/metrics");
            let router = api::admin_only_router(&state, admin_routes);
            servers.spawn(listen::serve(
                l,
                router,
                tls.clone(),
                shutdown_signal(),
                limits.clone(),
            ));
            api::router(state.clone(), api::AdminPlace::At(admin_addr))
        }
        None => api::router(state.clone(), api::AdminPlace::Here(admin_routes)),
    };
    if let Some(l) = s3_listener {
        let s3_addr = l.local_addr().map_err(StartError::Serve)?;
        tracing::info!(%s3_addr, "the S3 gateway is listening; try: aws --endpoint-url {scheme}://{s3_addr} s3 ls");
        let router = api::s3_only_router(AppState { s3, ..state });
        servers.spawn(listen::serve(
            l,
            router,
            tls.clone(),
            shutdown_signal(),
            limits.clone(),
        ));
    } else if s3.is_some() {
        tracing::info!(
            "the S3 gateway shares this listener; try: aws --endpoint-url {scheme}://{addr} s3 ls"
        );
    }
    tracing::info!(%addr, "fencegate is listening; try: curl {scheme}://{addr}/healthz");
    servers.spawn(listen::serve(
        listener,
        native_router,
        tls,
        shutdown_signal(),
        limits,
    ));
    while servers.join_next().await.is_some() {}
    tracing::info!("fencegate stopped");
    Ok(())
}

/// `max_connections`, lowered to leave room under the open-file limit for what each
/// connection's request opens (staging files, the fence table, store connections).
fn connection_budget(max_connections: usize) -> usize {
    let files = rlimit::getrlimit(rlimit::Resource::NOFILE)
        .map(|(soft, _hard)| usize::try_from(soft).unwrap_or(usize::MAX))
        .unwrap_or(usize::MAX);
    // A quarter of the descriptors stays for what requests open: staging files, directories
    // fsynced, the fence table's files, connections to an s3 store.
    let fits = (files - files / 4).max(16);
    if max_connections > fits {
        tracing::warn!(max_connections, open_file_limit = files, lowered_to = fits,
            "[server] max_connections does not fit the open-file limit; raise the limit (ulimit -n, LimitNOFILE) to allow more");
        return fits;
    }
    max_connections.max(1)
}

/// SIGHUP reloads the configuration: keys, bucket policies and the TLS certificate (a renewal
/// copied into place), all or nothing (`reload.rs`); a refused reload is logged and the
/// configuration in use stays.
async fn reload_on_sighup(reloader: Arc<reload::Reloader>) {
    let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) else {
        tracing::warn!(
            "SIGHUP cannot be watched; reload the configuration with POST /admin/reload"
        );
        return;
    };
    while hup.recv().await.is_some() {
        match reloader.reload("SIGHUP").await {
            Ok(report) if report.unchanged() && report.tls == "off" => tracing::info!(
                "SIGHUP: nothing to reload (the keys and policies are unchanged, and [server.tls] is not set)"
            ),
            Ok(_) => tracing::info!("SIGHUP: the configuration was reloaded"),
            Err(e) => {
                tracing::error!(error = %e, "the reload on SIGHUP was refused; the configuration in use stays")
            }
        }
    }
}

/// The backend handles (store upload ids) of every upload in the registry at `dir`, whatever
/// its bucket: an upload is kept if any bucket's client may still complete it.
fn registered_handles(dir: &std::path::Path) -> std::collections::HashSet<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Default::default();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read(e.path()).ok())
        .filter_map(|bytes| serde_json::from_slice::<Upload>(&bytes).ok())
        .map(|u| u.handle)
        .collect()
}

async fn bind(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, StartError> {
    tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Listen { addr, error })
}

pub use crate::auth::DEV_KEY;

/// The S3 gateway over `gate`, authenticating against `keys`.
fn s3_service(
    config: &Config,
    gate: Arc<Gate>,
    catalog: Arc<Catalog>,
    keys: Arc<KeyTable>,
) -> Result<s3s::service::S3Service, StartError> {
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
