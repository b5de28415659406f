//! The command line: `fencegate [serve]`, `fencegate check-config FILE`, `fencegate
//! probe-store BACKEND`, `fencegate fences ...` and `fencegate leases ...` (the admin ones:
//! src/admin_client.rs).

pub use crate::admin_client::{Connection, ListArgs};
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
///   fencegate probe-store store --config config/s3-backend.toml   # before data goes through it
///   fencegate fences get default report.csv    # on a running instance (see --help)
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
    /// Validate a configuration, with the checks `serve` makes before it opens anything, and
    /// print the effective policies; exits 1 on error. FENCEGATE_* variables apply, as they do
    /// to `serve`.
    CheckConfig {
        /// The TOML file to check; without one, the embedded default (as a container started
        /// with FENCEGATE_* variables only runs).
        file: Option<PathBuf>,
        /// The same file, named as `serve --config` names it.
        #[arg(short, long = "config", value_name = "FILE", conflicts_with = "file")]
        config: Option<PathBuf>,
    },
    /// Show, advance and list the fences of a running instance (through its admin surface),
    /// or rebuild a bucket's fences offline.
    Fences {
        #[command(subcommand)]
        command: FencesCommand,
    },
    /// List, show or revoke the live leases of a running instance (through its admin surface).
    Leases {
        #[command(subcommand)]
        command: LeasesCommand,
    },
    /// A running instance at a glance: version, uptime, mode, the fence table and its size,
    /// leases held, every readiness check with its error, each bucket's backend, and on etcd
    /// each member's status. Exits 1 when the instance is not ready.
    Status {
        #[command(flatten)]
        conn: Connection,
    },
    /// Ask a running instance whether it can serve writes (GET /readyz), for a container's
    /// HEALTHCHECK or an exec probe: exits 0 when it is ready, and 1 with each failing check
    /// when it is not or cannot be reached.
    Healthcheck {
        /// The instance's readiness URL.
        #[arg(long, default_value = "http://127.0.0.1:8080/readyz")]
        url: String,
        /// PEM CA certificates to trust for an https URL, besides the system's.
        #[arg(long, value_name = "FILE")]
        ca_file: Option<std::path::PathBuf>,
        /// How long to wait for the answer (`3s`, `500ms`).
        #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Tell whether an S3 store or an Azure blob service can be fronted in safe mode, before
    /// any data goes through it: If-None-Match and If-Match on the writes and deletes its
    /// commits send (S3: PutObject, CompleteMultipartUpload, DeleteObject; Azure: Put Blob,
    /// Copy Blob, Delete Blob), one at a time and then WRITERS at once on one key (exactly one
    /// may win). Runs on a scratch prefix (`.fencegate-probe/`) of each store bucket (or
    /// container) the configuration puts on BACKEND, and removes what it wrote; `serve` runs
    /// the same probe at every start. Exits 0 when the store is safe, 1 when it is not, 2 when
    /// it could not be probed.
    ProbeStore {
        /// The name of an s3 or azure backend, as in [backends.NAME].
        backend: String,
        /// Configuration file (TOML); FENCEGATE_* variables apply, as they do to `serve`.
        #[arg(short, long, env = "FENCEGATE_CONFIG")]
        config: Option<PathBuf>,
        /// Probe this store bucket instead of those the configuration's buckets use.
        #[arg(long)]
        bucket: Option<String>,
        /// Concurrent writers in each race (default: as many as `serve` races at start-up, 16
        /// on s3, 8 on azure).
        #[arg(long, value_parser = clap::value_parser!(u16).range(2..=256))]
        writers: Option<u16>,
        /// Print JSON instead of the table.
        #[arg(long)]
        json: bool,
    },
    /// Make a running instance read its keys, bucket policies and TLS certificate again (as
    /// SIGHUP), all or nothing, and print what changed.
    Reload {
        #[command(flatten)]
        conn: Connection,
    },
}

#[derive(Subcommand, Debug)]
pub enum FencesCommand {
    /// Show the scope a key maps to and its highest token.
    Get {
        bucket: String,
        key: String,
        /// The lock's name (Fencing-Scope), for a bucket with scope = "header".
        #[arg(long, value_name = "NAME")]
        scope: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Raise a scope's highest token to TOKEN without writing.
    ///
    /// Every holder of a lower token is fenced out. It never lowers a fence: at or below the
    /// highest it changes nothing and says so (exit 0). Lowering one is `fences reset`.
    Advance {
        bucket: String,
        key: String,
        /// The new highest token, 0 to 18446744073709551615 (the server checks it).
        #[arg(allow_hyphen_values = true)]
        token: String,
        /// The lock's name (Fencing-Scope), for a bucket with scope = "header".
        #[arg(long, value_name = "NAME")]
        scope: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// Lower a scope's highest token to TOKEN, after a fence was advanced too far by mistake.
    ///
    /// THIS UNDOES FENCING ON PURPOSE: a stale holder with a token above TOKEN is accepted
    /// again. First make sure no holder of a token above TOKEN still runs. The server refuses
    /// a TOKEN that does not lower the fence, and logs the reset as an audit line.
    #[command(verbatim_doc_comment)]
    Reset {
        bucket: String,
        key: String,
        /// The new highest token, below the current one.
        #[arg(allow_hyphen_values = true)]
        token: String,
        /// The lock's name (Fencing-Scope), for a bucket with scope = "header".
        #[arg(long, value_name = "NAME")]
        scope: Option<String>,
        #[command(flatten)]
        conn: Connection,
    },
    /// List a bucket's recorded fence rows: scope, highest token, tombstone, commit in flight.
    List {
        #[command(flatten)]
        list: ListArgs,
        #[command(flatten)]
        conn: Connection,
    },
    /// Rebuild a bucket's fence rows from its objects, after the data directory was lost.
    ///
    /// Every object carries the token that wrote it (x-amz-meta-fencing-token on s3, the
    /// file trailer on fs). For each scope the highest token becomes the maximum found on its
    /// objects; a token already recorded is never lowered. Each object's current version is
    /// recorded as fencegate's own, so the next write is not mistaken for a bypass.
    ///
    /// IT CANNOT RECOVER TOMBSTONES. A deleted object leaves nothing to read, so after a
    /// rebuild a zombie holding a token at or above the scope's rebuilt highest could
    /// re-create an object that was deleted with a newer token. Advance such scopes by hand
    /// (POST /v1/fences/...) with a token above any the lock service has issued, or take new
    /// tokens from the lock service before resuming writes.
    #[command(verbatim_doc_comment)]
    Rebuild {
        /// The fencegate bucket to scan.
        #[arg(long)]
        bucket: String,
        #[command(flatten)]
        config: ServeArgs,
    },
}

#[derive(Subcommand, Debug)]
pub enum LeasesCommand {
    /// Every live lease: name, holder, token, expiry, binding, the key that holds it.
    List {
        #[command(flatten)]
        conn: Connection,
    },
    /// One lease: its holder, token, expiry, binding and principal, and the S3 credentials its
    /// earlier grants issued that still work (in their grace).
    Get {
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
    /// End a lease now, whoever holds it, and every S3 credential it issued. Its holder's
    /// renewals fail from now on; the next grant fences its token out.
    Revoke {
        name: String,
        #[command(flatten)]
        conn: Connection,
    },
}

#[derive(Args, Debug, Default, Clone)]
pub struct ServeArgs {
    /// Configuration file (TOML). Without it, the embedded default is used.
    /// Every field is documented in config/fencegate.toml, and can also be set from a
    /// FENCEGATE_SECTION__FIELD variable (e.g. FENCEGATE_SERVER__LISTEN), over the file.
    #[arg(long, short, env = "FENCEGATE_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Address to listen on, overriding [server] listen (default 127.0.0.1:8080).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Directory for the fence table and the default fs backend, overriding
    /// [server] data_dir (default ./data).
    #[arg(long, value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Start although BUCKET's scope (or prefix_segments) differs from the one its fence rows
    /// were recorded under, and record the new one. The tokens and tombstones recorded under the
    /// old scope stop applying: first stop the bucket's writers and make sure their next tokens
    /// are above every token used before. Repeat for several buckets.
    #[arg(long, value_name = "BUCKET")]
    pub accept_scope_change: Vec<String>,
    /// Log format on stderr, overriding [server] log_format (default text).
    #[arg(long, value_enum, value_name = "FORMAT")]
    pub log_format: Option<crate::logging::LogFormat>,
    /// Refuse to start when the RocksDB fence table does not exist yet, instead of creating an
    /// empty one: for a deployment that must never forget its recorded tokens (a wrong
    /// data_dir, an unmounted volume).
    #[arg(long, env = "FENCEGATE_REQUIRE_EXISTING_TABLE")]
    pub require_existing_table: bool,
}
