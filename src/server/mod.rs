//! Wiring: turns a validated [`Config`] into a running fencegate (fence store, backends, gate,
//! native API, S3 gateway, admin surface) and serves it until SIGINT or SIGTERM. `listen.rs`
//! holds the accept loop every listener runs, `tls.rs` the certificates it offers.

mod linger;
mod listen;
pub mod reload;
pub mod routes;
pub mod tls;

pub use crate::catalog::{build_gate, StartupError};

use crate::api::{self, AppState};
use crate::auth::KeyTable;
use crate::catalog::{Backends, Catalog};
use crate::config::Config;
use crate::gate::{Gate, UploadRegistry};
use crate::lease::Leases;
use crate::s3api::{self, S3Gateway};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Semaphore;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {error}; pick another address with --listen or stop what holds the port")]
    Listen {
        addr: std::net::SocketAddr,
        error: std::io::Error,
    },
    #[error("the server failed: {0}")]
    Serve(std::io::Error),
    #[error("{first} and {second} are both {addr}: each listener needs an address of its own (leave {second} unset to serve it on {first}'s)")]
    SameAddress {
        first: &'static str,
        second: &'static str,
        addr: std::net::SocketAddr,
    },
    #[error("no keys are configured, so fencegate is in development mode, where anyone may do anything; it therefore listens on loopback only, and {addr} is not loopback. Add a key to the configuration ([keys.NAME] with access_key_id, secret_access_key_file and bucket permissions; README, \"Security\"), or listen on 127.0.0.1. To expose development mode anyway, set [server] protected_mode = false")]
    Unprotected { addr: std::net::SocketAddr },
    #[error("{0}")]
    Tls(#[from] tls::TlsError),
    /// The fence table, a backend, a store or the configuration (`catalog::startup`).
    #[error(transparent)]
    Startup(#[from] crate::catalog::StartupError),
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
            // The secret is the README's, never a log line's: scanners flag secrets in logs.
            tracing::warn!(
                access_key_id = DEV_KEY.0,
                "development mode: no [keys] are configured, so anonymous requests and the development key (its secret is in the README, \"Use it as an S3 endpoint\") may do anything; listening on loopback only"
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

/// The checks `serve` makes before it opens anything, which `check-config` makes too: no
/// development mode on a public address, one address per listener, buckets that do not share
/// store keys or fencegate's own directories, and certificates that load.
pub fn preflight(config: &Config) -> Result<(), StartError> {
    check_protected(config)?;
    let listeners = [
        ("[server] listen", Some(config.listen)),
        ("[admin] listen", config.admin_listen),
        (
            "[s3] listen",
            config.s3_listen.filter(|_| config.s3.enabled),
        ),
    ];
    for (i, (a, addr)) in listeners.iter().enumerate() {
        for (b, other) in &listeners[i + 1..] {
            if let (Some(x), Some(y)) = (addr, other) {
                // Port 0 is any free port: two of them never clash.
                if x == y && x.port() != 0 {
                    return Err(StartError::SameAddress {
                        first: a,
                        second: b,
                        addr: *x,
                    });
                }
            }
        }
    }
    // The buckets' stores and fencegate's own directories, with every path resolved.
    config
        .check_namespaces(&Default::default())
        .map_err(crate::catalog::StartupError::from)?;
    if let Some(files) = &config.server.tls {
        tls::Tls::load(&files.cert_file, &files.key_file)?;
    }
    Ok(())
}

/// Runs fencegate until a shutdown signal.
pub async fn serve(config: Config) -> Result<(), StartError> {
    let started_at_ms = crate::wall_clock::now_ms();
    preflight(&config)?;
    for warning in &config.warnings {
        tracing::warn!("{warning}");
    }
    // One shutdown for every listener and background loop. Signals start it only once the
    // listeners serve: before, SIGTERM ends the start-up at once, as it always has.
    let shutdown = crate::shutdown::Shutdown::new();
    let metrics = crate::metrics::install(&shutdown);
    // The registry first: the uploads clients started stay, other store uploads are swept.
    let uploads_dir = config.server.data_dir.join("uploads");
    let uploads =
        UploadRegistry::open(uploads_dir.clone()).map_err(|error| StartupError::Backend {
            name: "uploads".into(),
            path: uploads_dir.display().to_string(),
            error,
        })?;
    let registered = uploads.handles();
    let (gate, store, backends) =
        crate::catalog::build(&config, Backends::for_startup(registered)).await?;
    for line in config.describe().lines() {
        tracing::info!("{line}");
    }
    // A shared fence table holds the uploads for every instance; the local registry is then
    // only what start-up kept the sweep off (no sweep runs on a shared table).
    let uploads = if store.shared() {
        UploadRegistry::shared(store.clone())
    } else {
        uploads
    };
    let gate = Arc::new(gate.with_uploads(uploads));
    // Cluster mode: the clock checked at start-up is checked again as it runs.
    gate.watch_clocks(Duration::from_secs(10), &shutdown);
    for bucket in config.buckets.keys() {
        crate::metrics::register_bucket(bucket);
    }
    crate::health::watch(gate.clone(), &shutdown);
    crate::fence::census::watch(
        gate.fence_store().clone(),
        config.server.data_dir.clone(),
        &shutdown,
    );
    expire_uploads(gate.clone(), &shutdown);
    // A bucket already past max_tombstones_per_bucket (a restart forgets what was counted)
    // is folded now, not after as many deletes again.
    let counting = gate.clone();
    shutdown.spawn_background(async move {
        if let Err(e) = counting.count_tombstones_at_start().await {
            tracing::warn!(error = %e, "cannot count the fence table's tombstones at start-up; each bucket is folded after max_tombstones_per_bucket deletes from now");
        }
    });
    let catalog = Arc::new(Catalog::new(
        config.clone(),
        gate.clone(),
        store.clone(),
        backends,
    ));
    let leases = Arc::new(
        Leases::new(
            gate.clone(),
            store,
            Duration::from_secs(config.leases.credential_grace_secs),
        )
        .with_max_live_per_key(config.leases.max_live_per_key),
    );
    leases.watch(&shutdown);
    let created = catalog
        .load()
        .await
        .map_err(|e| StartupError::Gateway(e.to_string()))?;
    if created > 0 {
        tracing::info!(created, "serving buckets created through the S3 API");
    }
    catalog.watch(&shutdown);
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
    shutdown.spawn_background(reload_on_sighup(reloader.clone()));
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
        max_header_bytes: config.server.max_header_bytes,
        leases,
        keys: keys.clone(),
        reloader,
        about: Arc::new(crate::api::status::About::of(&config, started_at_ms)),
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
    let budget = connection_budget(config.server.max_connections);
    crate::metrics::connection_limit(budget);
    let limits = listen::Limits {
        connections: Arc::new(Semaphore::new(budget)),
        grace: Duration::from_secs(config.server.shutdown_grace_secs),
        read_buffer: listen::Limits::read_buffer_for(config.server.max_header_bytes),
    };
    shutdown.on_signals();
    let mut servers = tokio::task::JoinSet::new();
    // The S3 gateway answers on the native listener unless it has one of its own.
    let shared_s3 = s3.clone().filter(|_| config.s3_listen.is_none());
    let native_router = match admin_listener {
        Some(l) => {
            let admin_addr = l.local_addr().map_err(StartError::Serve)?;
            // The hint works as printed: with a bearer token, it names the header (never the
            // token); with admin keys only, a signed client is needed.
            let hint = if config.admin_token.is_some() {
                format!("try: curl -H \"Authorization: Bearer $TOKEN\" {scheme}://{admin_addr}/metrics, with the token of [admin] bearer_token_file")
            } else if !config.keys.is_empty() {
                format!("try: fencegate leases list --url {scheme}://{admin_addr} --access-key-id ID (an admin key; its secret in FENCEGATE_SECRET_ACCESS_KEY)")
            } else {
                format!("try: curl {scheme}://{admin_addr}/metrics")
            };
            tracing::info!(%admin_addr, "the admin surface is listening; {hint}");
            let router = routes::admin_only_router(&state, admin_routes);
            servers.spawn(listen::serve(
                l,
                router,
                tls.clone(),
                shutdown.clone(),
                limits.clone(),
            ));
            routes::router(state.clone(), shared_s3, routes::AdminPlace::At(admin_addr))
        }
        None => routes::router(
            state.clone(),
            shared_s3,
            routes::AdminPlace::Here(admin_routes),
        ),
    };
    if let Some(l) = s3_listener {
        let s3_addr = l.local_addr().map_err(StartError::Serve)?;
        tracing::info!(%s3_addr, "the S3 gateway is listening; try: aws --endpoint-url {scheme}://{s3_addr} s3 ls");
        let router = routes::s3_only_router(&state, s3);
        servers.spawn(listen::serve(
            l,
            router,
            tls.clone(),
            shutdown.clone(),
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
        shutdown.clone(),
        limits,
    ));
    while servers.join_next().await.is_some() {}
    // The listeners waited for the requests in flight; a commit whose client hung up may still
    // run. It gets what is left of the grace.
    let grace = Duration::from_secs(config.server.shutdown_grace_secs);
    if !crate::shutdown::drain_commits(grace.saturating_sub(shutdown.elapsed())).await {
        tracing::warn!(
            grace_secs = grace.as_secs(),
            "commits still in flight after the shutdown grace ([server] shutdown_grace_secs); stopping anyway"
        );
    }
    shutdown.finish();
    tracing::info!("fencegate stopped");
    Ok(())
}

/// `max_connections`, lowered to leave room under the open-file limit for what each
/// connection's request opens (staging files, the fence table, store connections).
fn connection_budget(max_connections: usize) -> usize {
    let files = rlimit::getrlimit(rlimit::Resource::NOFILE)
        .map(|(soft, _hard)| usize::try_from(soft).unwrap_or(usize::MAX))
        .unwrap_or(usize::MAX);
    // A request holds its connection's socket and, while its body streams, a file (a staging
    // or part file, a spool file and a connection to an s3 store on the s3 backend): a third
    // of the descriptors go to connections, so that every connection can hold what its
    // request opens, with room left for the fence table and directories being fsynced.
    let fits = (files / 3).max(16);
    if max_connections > fits {
        // A default never warns: only a limit the operator chose is worth their attention.
        if max_connections == crate::config::ServerConfig::default().max_connections {
            tracing::info!(
                max_connections = fits,
                open_file_limit = files,
                "[server] max_connections fits the open-file limit (a third of it)"
            );
        } else {
            tracing::warn!(max_connections, open_file_limit = files, lowered_to = fits,
                "[server] max_connections does not fit the open-file limit; raise the limit (ulimit -n, LimitNOFILE) to allow more");
        }
        return fits;
    }
    max_connections.max(1)
}

/// SIGHUP reloads the configuration: keys, bucket policies and the TLS certificate (a renewal
/// copied into place), all or nothing (`reload.rs`); a refused reload is logged and the
/// configuration in use stays.
/// Watches SIGHUP from now on (registered here, before the caller goes on, so that a SIGHUP
/// sent once fencegate listens never meets the default action, which ends the process), and
/// reloads on each.
fn reload_on_sighup(reloader: Arc<reload::Reloader>) -> impl std::future::Future<Output = ()> {
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    async move {
        let Ok(mut hup) = hup else {
            tracing::warn!(
                "SIGHUP cannot be watched; reload the configuration with POST /admin/reload"
            );
            return;
        };
        reload_each(&mut hup, &reloader).await
    }
}

async fn reload_each(hup: &mut tokio::signal::unix::Signal, reloader: &reload::Reloader) {
    while hup.recv().await.is_some() {
        match reloader.reload("SIGHUP").await {
            Ok(report) if report.unchanged() && report.tls == "off" => tracing::info!(
                "SIGHUP: nothing to reload (the keys and policies are unchanged, and [server.tls] is not set)"
            ),
            Ok(_) => tracing::info!("SIGHUP: the configuration was reloaded"),
            // The audit line (principal=SIGHUP) already says why, once.
            Err(_) => {}
        }
    }
}

/// The backend handles (store upload ids) of every upload in the registry at `dir`, whatever
/// its bucket: an upload is kept if any bucket's client may still complete it.
/// Aborts incomplete multipart uploads past `[server] upload_expiry_secs`, at start-up (they
/// may have expired while fencegate was down) and then every `Gate::upload_sweep_every`.
fn expire_uploads(gate: Arc<Gate>, shutdown: &crate::shutdown::Shutdown) {
    shutdown.spawn_background(async move {
        loop {
            let expired = gate.expire_uploads().await;
            if expired > 0 {
                tracing::info!(
                    expired,
                    "aborted incomplete multipart uploads past upload_expiry_secs"
                );
            }
            tokio::time::sleep(gate.upload_sweep_every()).await;
        }
    });
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
) -> Result<s3api::Endpoint, StartError> {
    let gateway = S3Gateway {
        gate,
        catalog,
        keys,
        max_body_bytes: config.server.max_body_bytes,
        body_idle_timeout: Duration::from_secs(config.server.body_idle_timeout_secs),
        max_parts: config.s3.max_parts,
        region: config.s3.region.clone(),
    };
    s3api::service(gateway, &config.s3).map_err(|e| StartupError::Gateway(e).into())
}

#[cfg(test)]
mod tests {
    #[test]
    fn connections_get_a_third_of_the_descriptors() {
        let (soft, _) = rlimit::getrlimit(rlimit::Resource::NOFILE).unwrap();
        let budget = super::connection_budget(usize::MAX);
        // Each connection may hold a socket and a file at once, with room left over.
        assert!(budget as u64 * 3 <= soft.max(48), "{budget} of {soft}");
        assert_eq!(super::connection_budget(10), 10.min(budget));
    }
}
