//! The `fencegate` binary: parses the command line, sets up logging and hands over to the
//! library.

use clap::Parser;
use fencegate::admin_client;
use fencegate::cli::{Cli, Command, FencesCommand, LeasesCommand, ServeArgs};
use fencegate::config::{Config, Sources};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    fencegate::logging::init();
    match cli.command {
        Some(Command::CheckConfig { file, config }) => check_config(file.or(config).as_deref()),
        Some(Command::Serve(args)) => serve(args),
        Some(Command::Fences { command }) => match command {
            FencesCommand::Rebuild { bucket, config } => rebuild(&bucket, config),
            FencesCommand::Get {
                bucket,
                key,
                scope,
                conn,
            } => admin(
                async move { admin_client::get(&conn, &bucket, &key, scope.as_deref()).await },
            ),
            FencesCommand::Advance {
                bucket,
                key,
                token,
                scope,
                conn,
            } => admin(async move {
                admin_client::advance(&conn, &bucket, &key, &token, scope.as_deref()).await
            }),
            FencesCommand::Reset {
                bucket,
                key,
                token,
                scope,
                conn,
            } => admin(async move {
                admin_client::reset(&conn, &bucket, &key, &token, scope.as_deref()).await
            }),
            FencesCommand::List { list, conn } => {
                admin(async move { admin_client::list(&conn, &list).await })
            }
        },
        Some(Command::Leases { command }) => match command {
            LeasesCommand::List { conn } => admin(async move { admin_client::leases(&conn).await }),
            LeasesCommand::Get { name, conn } => {
                admin(async move { admin_client::lease(&conn, &name).await })
            }
            LeasesCommand::Revoke { name, conn } => {
                admin(async move { admin_client::revoke(&conn, &name).await })
            }
        },
        Some(Command::Status { conn }) => admin(async move { admin_client::status(&conn).await }),
        Some(Command::Healthcheck {
            url,
            ca_file,
            timeout,
        }) => {
            admin(async move { admin_client::healthcheck(&url, ca_file.as_deref(), timeout).await })
        }
        Some(Command::Reload { conn }) => admin(async move { admin_client::reload(&conn).await }),
        Some(Command::ProbeStore {
            backend,
            config,
            bucket,
            writers,
            json,
        }) => probe_store(
            &backend,
            config.as_deref(),
            bucket.as_deref(),
            writers.map(usize::from),
            json,
        ),
        None => serve(cli.serve),
    }
}

/// `check-config`: the configuration read as `serve` reads it, and the checks `serve` makes
/// before it opens the fence table and the stores (`server::preflight`).
fn check_config(file: Option<&std::path::Path>) -> ExitCode {
    let what = file.map_or("the embedded default configuration".to_string(), |f| {
        f.display().to_string()
    });
    let checked = Config::from_env(file)
        .map_err(|e| e.to_string())
        .and_then(|config| {
            fencegate::server::preflight(&config).map_err(|e| e.to_string())?;
            Ok(config)
        });
    match checked {
        Ok(config) => {
            print!("{}", config.describe());
            println!("ok: {what} is valid");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `probe-store`: the store probe `serve` runs at start-up, printed. Exits 0 when every store
/// bucket is safe, 1 when one is not, 2 when the probe could not run.
#[cfg(any(feature = "s3", feature = "azure", feature = "gcs"))]
fn probe_store(
    backend: &str,
    file: Option<&std::path::Path>,
    bucket: Option<&str>,
    writers: Option<usize>,
    json: bool,
) -> ExitCode {
    use fencegate::catalog::store_probe;
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    let verdicts = Config::from_env(file)
        .map_err(|e| e.to_string())
        .and_then(|config| {
            runtime.block_on(store_probe::probe_store(&config, backend, bucket, writers))
        });
    let verdicts = match verdicts {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&verdicts).expect("verdicts serialize")
        );
    } else {
        print!("{}", store_probe::table(&verdicts));
    }
    if verdicts.iter().all(|v| v.safe) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[cfg(not(any(feature = "s3", feature = "azure", feature = "gcs")))]
fn probe_store(
    _: &str,
    _: Option<&std::path::Path>,
    _: Option<&str>,
    _: Option<usize>,
    _: bool,
) -> ExitCode {
    eprintln!("error: this fencegate was built without the s3, azure and gcs backends (--no-default-features); build it with the default features to probe a store");
    ExitCode::from(2)
}

/// Runs an admin command; a failure is printed with its hint and exits 1.
fn admin(
    command: impl std::future::Future<Output = Result<(), admin_client::AdminError>>,
) -> ExitCode {
    let runtime = match runtime() {
        Ok(r) => r,
        Err(code) => return code,
    };
    match runtime.block_on(command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load(args: &ServeArgs) -> Result<Config, ExitCode> {
    // The same sources are read again on a reload (SIGHUP, POST /admin/reload).
    let sources = Sources {
        file: args.config.clone(),
        env: true,
        listen: args.listen,
        data_dir: args.data_dir.clone(),
        accept_scope_change: args.accept_scope_change.clone(),
        require_existing_table: args.require_existing_table,
    };
    match sources.load() {
        Ok(c) => {
            fencegate::logging::use_format(args.log_format.unwrap_or(c.server.log_format));
            Ok(c)
        }
        Err(e) => {
            eprintln!("error: {e}");
            Err(ExitCode::FAILURE)
        }
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Runtime::new().map_err(|e| {
        eprintln!("error: cannot start the async runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Raises the open-file limit to its hard maximum: every connection is a descriptor, and the
/// usual soft default (1024) would cap a public-facing server at about a thousand clients.
fn raise_fd_limit() {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(now) => tracing::debug!(open_file_limit = now, "raised the open-file limit"),
        Err(e) => tracing::debug!(error = %e, "the open-file limit could not be raised"),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    raise_fd_limit();
    let (config, runtime) = match (load(&args), runtime()) {
        (Ok(c), Ok(r)) => (c, r),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    match runtime.block_on(fencegate::server::serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn rebuild(bucket: &str, args: ServeArgs) -> ExitCode {
    let (config, runtime) = match (load(&args), runtime()) {
        (Ok(c), Ok(r)) => (c, r),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    if config.etcd.is_some() {
        // Other instances write the shared table while this runs: a rebuild would take their
        // commits in flight for its own and clear tombstones.
        eprintln!("error: fences rebuild works on one instance's own RocksDB table; [fence_store] kind = \"etcd\" is shared with running instances, so it is refused there");
        return ExitCode::FAILURE;
    }
    let result = runtime.block_on(async {
        let (gate, _store) = fencegate::server::build_gate(&config, bucket)
            .await
            .map_err(|e| e.to_string())?;
        let started = std::time::Instant::now();
        gate.rebuild(bucket, |scanned| {
            eprintln!(
                "scanned {scanned} objects ({:.0}/s)",
                scanned as f64 / started.elapsed().as_secs_f64().max(0.001)
            )
        })
        .await
        .map_err(|e| e.to_string())
    });
    match result {
        Ok(r) => {
            println!(
                "rebuilt bucket {bucket}: {} objects ({} without a token), {} scopes, {} raised",
                r.objects, r.untokened, r.scopes, r.raised
            );
            println!("tombstones were not recovered (see `fencegate fences rebuild --help`)");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
