//! The `fencegate` binary: parses the command line, sets up logging and hands over to the
//! library.

use clap::Parser;
use fencegate::cli::{Cli, Command, ServeArgs};
use fencegate::config::Config;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match cli.command {
        Some(Command::CheckConfig { file }) => match Config::load(&file) {
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
        None => serve(cli.serve),
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let config = match &args.config {
        Some(path) => Config::load(path),
        None => Ok(Config::embedded_default()),
    };
    let config = match config {
        Ok(c) => c.with_overrides(args.listen, args.data_dir),
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(fencegate::server::serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
