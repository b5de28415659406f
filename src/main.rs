//! The `fencegate` binary: parses the command line, sets up logging and hands over to the
//! library.

use clap::Parser;
use fencegate::cli::{Cli, Command, FencesCommand, ServeArgs};
use fencegate::config::{Config, Sources};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"))
                // s3s logs the expected signature of a failed request at debug: whoever reads
                // that log could then sign as any key (review round 4). Capped, whatever
                // RUST_LOG says.
                .add_directive("s3s=info".parse().expect("a valid directive")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Some(Command::CheckConfig { file }) => match Config::from_env(Some(file.as_path())) {
            Ok(config) => {
                print!("{}", config.describe());
                println!("ok: {} is valid", file.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        },
        Some(Command::Serve(args)) => serve(args),
        Some(Command::Fences {
            command: FencesCommand::Rebuild { bucket, config },
        }) => rebuild(&bucket, config),
        None => serve(cli.serve),
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
    };
    match sources.load() {
        Ok(c) => Ok(c),
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
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed to them.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let before = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                tracing::debug!(before, after = lim.rlim_cur, "raised the open-file limit");
            }
        }
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
        // commits in flight for its own and clear tombstones (review round 12).
        eprintln!("error: fences rebuild works on one instance's own RocksDB table; [fence_store] kind = \"etcd\" is shared with running instances, so it is refused there");
        return ExitCode::FAILURE;
    }
    let result = runtime.block_on(async {
        let (gate, _store) = fencegate::server::build_gate(&config)
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
