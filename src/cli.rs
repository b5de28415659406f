//! The command line: `fencegate [serve]` and `fencegate check-config FILE`.

use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;

/// fencegate: an HTTP gate in front of object storage that rejects writes carrying a stale
/// fencing token, so a paused or partitioned lock holder can never overwrite a newer one.
///
/// With no arguments it serves the embedded default: an `fs` backend and a RocksDB fence table
/// under ./data, and one bucket `default` that requires tokens, on 127.0.0.1:8080.
///
///   fencegate                                  # serve the embedded default
///   fencegate serve --config config/fencegate.toml
///   fencegate check-config config/fencegate.toml
///
///   curl -X PUT -H 'Fencing-Token: 34' --data-binary @file http://127.0.0.1:8080/v1/objects/default/report.csv
///
/// Logs go to stderr; set the level with RUST_LOG (e.g. RUST_LOG=debug or RUST_LOG=fencegate=debug).
#[derive(Parser, Debug)]
#[command(
    name = "fencegate",
    version,
    verbatim_doc_comment,
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the native HTTP API (the default when no command is given).
    Serve(ServeArgs),
    /// Validate a configuration file and print the effective policies; exits 1 on error.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
    },
}

#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// Configuration file (TOML). Without it, the embedded default is used.
    /// Every field is documented in config/fencegate.toml.
    #[arg(long, short, env = "FENCEGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, overriding [server] listen (default 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Directory for the fence table and the default fs backend, overriding
    /// [server] data_dir (default ./data).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
}
