//! Configuration: reads the TOML file (or the embedded default), validates it, and hands the
//! rest of fencegate a typed, checked [`Config`]. Errors name the file, the line and the fix.

mod azure_backend;
pub mod cors;
mod describe;
mod fence_store;
mod gcs_backend;
pub mod keys;
pub mod layers;
mod model;
mod namespace;
mod units;
mod validate;

pub use cors::CorsRule;
pub use fence_store::EtcdConfig;

pub use keys::{Key, Permission};
pub use model::{
    AzureBackendConfig, BackendConfig, BucketPolicy, BypassPolicy, ConditionalWrites,
    FenceStoreConfig, FenceStoreKind, FencingMode, GcsBackendConfig, LeaseConfig, LogFormat,
    S3BackendConfig, S3GatewayConfig, S3Key, ScopeKind, ServerConfig, TokenOrder,
    DEFAULT_MAX_UPLOADS_PER_BUCKET, DEFAULT_MAX_UPLOADS_PER_KEY, DEFAULT_UNVERIFIED_BODY_BYTES,
    DEFAULT_UPLOAD_EXPIRY_SECS, MAX_UNVERIFIED_BODY,
};

pub use namespace::Namespace;
pub use validate::{bucket_name_problem, parse, parse_layered, s3_domain_problem};

/// What to say when a config asks for a part this binary was built without: `feature` is the
/// Cargo feature that builds it, `what` the setting that asks for it.
pub fn not_built(feature: &str, what: &str) -> String {
    format!("{what} needs the `{feature}` feature, and this fencegate was built without it")
}

/// How to get a binary with `feature`.
pub fn rebuild_with(feature: &str) -> String {
    format!("build the default (cargo build --release --locked), or add --features {feature}")
}

use layers::EnvLayer;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// The name of the bucket that exists when the file defines none.
pub const DEFAULT_BUCKET: &str = "default";
/// The name of the backend that exists when the file defines none.
pub const DEFAULT_BACKEND: &str = "local";

/// A configuration that passed validation.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it came from, for messages: a path, or "embedded default".
    pub source: String,
    pub server: ServerConfig,
    pub listen: SocketAddr,
    pub fence_store: FenceStoreConfig,
    /// `Some` when the fence table is shared on etcd (`[fence_store] kind = "etcd"`).
    pub etcd: Option<EtcdConfig>,
    pub backends: BTreeMap<String, BackendConfig>,
    pub buckets: BTreeMap<String, BucketPolicy>,
    pub s3: S3GatewayConfig,
    /// The policy of buckets created through the S3 API.
    pub bucket_defaults: Option<BucketPolicy>,
    pub leases: LeaseConfig,
    /// The S3 gateway's own listener, when it has one.
    pub s3_listen: Option<SocketAddr>,
    /// Buckets whose scope may differ from the one the fence table recorded (the command
    /// line's `--accept-scope-change`): the new one is recorded at start-up.
    pub accept_scope_change: std::collections::BTreeSet<String>,
    /// The key table, by name (`[keys]`, plus the deprecated `[s3.keys]`). Empty: development
    /// mode.
    pub keys: BTreeMap<String, Key>,
    /// Problems worth a warning at start-up (deprecated settings).
    pub warnings: Vec<String>,
    /// The admin surface's own listener, when it has one.
    pub admin_listen: Option<SocketAddr>,
    /// The admin surface's bearer token, when one is configured.
    pub admin_token: Option<AdminToken>,
    /// Where this configuration was read from, so that a reload reads the same.
    pub sources: Sources,
}

/// Where a configuration comes from: a file (or the embedded default), the environment's
/// `FENCEGATE_SECTION__FIELD` variables over it, and the command line's overrides over both.
/// Kept in the [`Config`] so that a reload (SIGHUP, `POST /admin/reload`) reads the same
/// sources the process started with.
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// The file; `None` is the embedded default.
    pub file: Option<PathBuf>,
    /// Layer the process's `FENCEGATE_*__*` variables over the file.
    pub env: bool,
    /// `--listen`.
    pub listen: Option<SocketAddr>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
    /// `--accept-scope-change`.
    pub accept_scope_change: Vec<String>,
    /// `--require-existing-table`.
    pub require_existing_table: bool,
}

impl Sources {
    /// Reads and validates the configuration these sources give.
    pub fn load(&self) -> Result<Config, ConfigError> {
        let (text, name) = match &self.file {
            Some(path) => (read_file(path)?, path.display().to_string()),
            None => (String::new(), "embedded default".to_string()),
        };
        let env = if self.env {
            EnvLayer::from_process().map_err(|(var, problem)| ConfigError {
                source_name: name.clone(),
                location: None,
                variable: Some(var),
                message: problem,
                fix: "set the variable to a plain value, or to a TOML array or inline table for a list or a table field".into(),
            })?
        } else {
            EnvLayer::none()
        };
        let mut config = parse_layered(&text, &name, &env)?;
        // A file's relative data_dir and [fence_store] path are the file's, not the working
        // directory's: started from elsewhere, fencegate would otherwise open a new, empty
        // fence table and accept every zombie's token again. A variable's or the command
        // line's value is the caller's, and an unset data_dir keeps its default, ./data of
        // the working directory.
        if let Some(file) = &self.file {
            let base = file.parent().unwrap_or(Path::new(""));
            let in_file = |section: &str, field: &str| {
                text.parse::<toml::Table>().ok().is_some_and(|t| {
                    t.get(section)
                        .and_then(|s| s.as_table())
                        .is_some_and(|s| s.contains_key(field))
                })
            };
            let set_by = |var: &str| env.names().contains(&var);
            if config.server.data_dir.is_relative()
                && in_file("server", "data_dir")
                && !set_by("FENCEGATE_SERVER__DATA_DIR")
            {
                config.server.data_dir = base.join(&config.server.data_dir);
            }
            if let Some(path) = &mut config.fence_store.path {
                if path.is_relative() && !set_by("FENCEGATE_FENCE_STORE__PATH") {
                    *path = base.join(&*path);
                }
            }
        }
        let mut config = config
            .with_overrides(self.listen, self.data_dir.clone())
            .with_scope_change_accepted(&self.accept_scope_change);
        if let Ok(absolute) = std::path::absolute(&config.server.data_dir) {
            config.server.data_dir = absolute;
        }
        if !env.is_empty() {
            config.source = format!("{name} + {}", env.names().join(", "));
        }
        config.sources = self.clone();
        Ok(config)
    }
}

fn read_file(path: &Path) -> Result<String, ConfigError> {
    std::fs::read_to_string(path).map_err(|e| ConfigError {
        source_name: path.display().to_string(),
        location: None,
        variable: None,
        message: format!("cannot read the file: {e}"),
        fix: "check the path given to --config (run `fencegate serve` with no --config to use the embedded default)".into(),
    })
}

/// The admin bearer token; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct AdminToken(pub String);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(<redacted>)")
    }
}

/// Shortest admin bearer token accepted: it is a password that never expires.
pub const MIN_ADMIN_TOKEN_LEN: usize = 24;
/// The shortest secret a key in `[keys]` may have.
pub const MIN_SECRET_LEN: usize = 16;

/// A configuration problem, with where it is and what to do about it.
#[derive(Debug, thiserror::Error)]
pub struct ConfigError {
    pub source_name: String,
    /// 1-based line and column in the file.
    pub location: Option<(usize, usize)>,
    /// The environment variable that set the value, when the environment did.
    pub variable: Option<String>,
    pub message: String,
    pub fix: String,
}

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.source_name)?;
        match (&self.variable, self.location) {
            (Some(var), _) => write!(f, ": environment variable {var}")?,
            (None, Some((line, col))) => write!(f, ":{line}:{col}")?,
            (None, None) => {}
        }
        write!(f, ": {}\n  fix: {}", self.message, self.fix)
    }
}

impl Config {
    /// The configuration used when no file is given: an `fs` backend and RocksDB under
    /// `./data`, and one bucket `default` that requires tokens with `object` scope.
    pub fn embedded_default() -> Config {
        parse("", "embedded default").expect("the embedded default is valid")
    }

    /// Reads and validates a file, without the environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_file(path)?;
        let mut config = parse(&text, &path.display().to_string())?;
        config.sources.file = Some(path.to_path_buf());
        Ok(config)
    }

    /// Reads the file (or the embedded default) with the process's `FENCEGATE_*__*`
    /// variables layered over it.
    pub fn from_env(file: Option<&Path>) -> Result<Config, ConfigError> {
        Sources {
            file: file.map(Path::to_path_buf),
            env: true,
            ..Sources::default()
        }
        .load()
    }

    /// Reads this configuration's sources again (a reload): the same file, the same
    /// variables and the same command-line overrides.
    pub fn reread(&self) -> Result<Config, ConfigError> {
        self.sources.load()
    }

    /// Applies command-line overrides, which win over the file.
    pub fn with_overrides(
        mut self,
        listen: Option<SocketAddr>,
        data_dir: Option<PathBuf>,
    ) -> Config {
        if let Some(listen) = listen {
            self.listen = listen;
            self.server.listen = listen.to_string();
            self.sources.listen = Some(listen);
        }
        if let Some(dir) = data_dir {
            self.server.data_dir = dir.clone();
            self.sources.data_dir = Some(dir);
        }
        self
    }

    /// Lets these buckets start with a scope other than the one recorded (after draining
    /// their writers); the new scope is recorded.
    pub fn with_scope_change_accepted(mut self, buckets: &[String]) -> Config {
        self.accept_scope_change.extend(buckets.iter().cloned());
        for b in buckets {
            if !self.sources.accept_scope_change.contains(b) {
                self.sources.accept_scope_change.push(b.clone());
            }
        }
        self
    }

    /// The bucket's scope as recorded in the fence table (`policy:<bucket>`): changing it
    /// re-keys every scope row, so the recorded tokens and tombstones would be forgotten.
    pub fn scope_kind(policy: &BucketPolicy) -> String {
        match policy.scope {
            ScopeKind::Object => "object".into(),
            ScopeKind::Bucket => "bucket".into(),
            ScopeKind::Header => "header".into(),
            ScopeKind::Prefix => format!("prefix/{}", policy.prefix_segments),
        }
    }

    pub fn fence_store_path(&self) -> PathBuf {
        self.fence_store
            .path
            .clone()
            .unwrap_or_else(|| self.server.data_dir.join("fences"))
    }

    /// The directory an `fs` backend keeps its objects in.
    pub fn fs_root(&self, root: &Option<PathBuf>) -> PathBuf {
        root.clone()
            .unwrap_or_else(|| self.server.data_dir.join("objects"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_text_is_the_embedded_default() {
        let c = Config::embedded_default();
        assert_eq!(c.listen.to_string(), "127.0.0.1:8080");
        let p = &c.buckets[DEFAULT_BUCKET];
        assert_eq!(p.fencing, FencingMode::Required);
        assert_eq!(p.scope, ScopeKind::Object);
        assert_eq!(p.backend, DEFAULT_BACKEND);
        assert_eq!(c.fence_store_path(), PathBuf::from("./data/fences"));
    }

    #[test]
    fn a_typo_names_line_and_fields() {
        let text = "[server]\nlisten = \"127.0.0.1:1\"\n\n[buckets.logs]\nfencing = \"required\"\nscop = \"prefix\"\n";
        let e = parse(text, "my.toml").unwrap_err();
        assert_eq!(e.location.map(|l| l.0), Some(6), "{e}");
        let shown = e.to_string();
        assert!(shown.starts_with("my.toml:6:"), "{shown}");
        assert!(shown.contains("scope"), "{shown}");
    }

    #[test]
    fn a_bad_enum_value_is_refused_with_choices() {
        let e = parse("[buckets.logs]\nfencing = \"sometimes\"\n", "f.toml").unwrap_err();
        assert_eq!(e.location.map(|l| l.0), Some(2));
        assert!(e.message.contains("required"), "{e}");
    }

    #[test]
    fn the_unverified_body_budget_is_within_its_bounds() {
        let c = parse("[server]\nmax_unverified_body_bytes = \"8MiB\"\n", "f.toml").unwrap();
        assert_eq!(c.server.max_unverified_body_bytes, 8 << 20);
        for (value, line) in [
            ("\"1023KiB\"", 2),
            ("0", 2),
            ("\"5GiB\"", 2),
            ("\"1TiB\"", 2),
        ] {
            let text = format!("[server]\nmax_unverified_body_bytes = {value}\n");
            let e = parse(&text, "f.toml").unwrap_err();
            assert!(
                e.message.contains("max_unverified_body_bytes"),
                "{value}: {e}"
            );
            assert!(e.fix.contains("4GiB"), "{value}: {e}");
            assert_eq!(e.location.map(|l| l.0), Some(line), "{value}: {e}");
        }
    }

    #[test]
    fn an_unknown_backend_is_refused() {
        let e = parse("[buckets.logs]\nbackend = \"nas\"\n", "f.toml").unwrap_err();
        assert!(e.message.contains("nas"), "{e}");
        assert!(e.fix.contains("[backends.nas]"), "{e}");
        // The value that names it.
        assert_eq!(e.location, Some((2, 11)));
    }

    fn layered(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env = EnvLayer::from_pairs(vars.iter().copied()).unwrap();
        parse_layered(text, "f.toml", &env)
    }

    #[test]
    fn variables_override_the_file_and_parse_from_strings() {
        let text = "[server]\nlisten = \"127.0.0.1:1\"\nmax_body_bytes = \"64MiB\"\n";
        let c = layered(
            text,
            &[
                ("FENCEGATE_SERVER__LISTEN", "127.0.0.1:2"),
                ("FENCEGATE_SERVER__BODY_IDLE_TIMEOUT_SECS", "2m"),
                ("FENCEGATE_SERVER__PROTECTED_MODE", "false"),
                ("FENCEGATE_S3__MAX_PARTS", "500"),
                ("FENCEGATE_BUCKETS__DEFAULT__FENCING", "optional"),
                ("FENCEGATE_BUCKETS__DEFAULT__MAX_TOKEN_JUMP", "1000"),
                ("FENCEGATE_KEYS__ETL__ACCESS_KEY_ID", "12345"),
                ("FENCEGATE_KEYS__ETL__SECRET_ACCESS_KEY", "0123456789abcdef"),
                (
                    "FENCEGATE_KEYS__ETL__BUCKETS",
                    "{ \"logs-*\" = [\"read\"] }",
                ),
            ],
        )
        .unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:2");
        assert_eq!(c.server.max_body_bytes, 64 * 1024 * 1024);
        assert_eq!(c.server.body_idle_timeout_secs, 120);
        assert!(!c.server.protected_mode);
        assert_eq!(c.s3.max_parts, 500);
        assert_eq!(c.buckets["default"].fencing, FencingMode::Optional);
        assert_eq!(c.buckets["default"].max_token_jump, Some(1000));
        let key = &c.keys["etl"];
        assert_eq!(
            (key.access_key_id.as_str(), key.secret_access_key.as_str()),
            ("12345", "0123456789abcdef")
        );
        assert!(key.allows(Permission::Read, "logs-1"));
        // A secret never reaches the description.
        assert!(!c.describe().contains("0123456789abcdef"));
    }

    #[test]
    fn every_rejected_field_has_a_place() {
        for (text, line) in [
            ("[server]\nlisten = \"nowhere\"\n", 2),
            ("[server]\n\nmax_body_bytes = 0\n", 3),
            ("[server]\nbody_idle_timeout_secs = \"0s\"\n", 2),
            ("[server]\nbody_idle_timeout_secs = \"soon\"\n", 2),
            ("[s3]\nlisten = \"x\"\n", 2),
            ("[s3]\nregion = \"r\"\nmax_parts = 10001\n", 3),
            ("[s3]\ndomain = \"http://s3.example.com\"\n", 2),
            (
                "[keys.a]\naccess_key_id = \"A\"\nsecret_access_key_env = \"FENCEGATE_UNSET_FOR_TESTS\"\n",
                3,
            ),
            ("[keys.a]\naccess_key_id = \"A\"\n", 1),
            (
                "[keys.a]\naccess_key_id = \"A\"\nbuckets = {}\nsecret_access_key = \"short\"\n",
                4,
            ),
            (
                "[keys.a]\naccess_key_id = \"A\"\nsecret_access_key = \"s-0123456789abcdef\"\n[keys.b]\naccess_key_id = \"A\"\nsecret_access_key = \"t-0123456789abcdef\"\n",
                5,
            ),
            ("[fence_store]\nkind = \"etcd\"\nendpoints = [\"x\"]\n", 3),
        ] {
            let e = parse(text, "f.toml").unwrap_err();
            assert_eq!(e.location.map(|l| l.0), Some(line), "{text}: {e}");
            assert!(e.to_string().starts_with(&format!("f.toml:{line}:")), "{e}");
        }
    }

    #[test]
    fn a_variable_is_named_instead_of_a_position() {
        let e = layered("", &[("FENCEGATE_S3__MAX_PARTS", "0")]).unwrap_err();
        assert_eq!(e.variable.as_deref(), Some("FENCEGATE_S3__MAX_PARTS"));
        assert!(e
            .to_string()
            .starts_with("f.toml: environment variable FENCEGATE_S3__MAX_PARTS: "));
        let e = layered("", &[("FENCEGATE_SERVER__LISTEN", "nowhere")]).unwrap_err();
        assert_eq!(e.variable.as_deref(), Some("FENCEGATE_SERVER__LISTEN"));
        let e = layered("", &[("FENCEGATE_SERVER__MAX_BODY_BYTES", "lots")]).unwrap_err();
        assert_eq!(
            e.variable.as_deref(),
            Some("FENCEGATE_SERVER__MAX_BODY_BYTES")
        );
        let e = layered("", &[("FENCEGATE_SERVER__LISTN", "x")]).unwrap_err();
        assert_eq!(e.variable.as_deref(), Some("FENCEGATE_SERVER__LISTN"));
        let e = layered("", &[("FENCEGATE_NOPE__X", "1")]).unwrap_err();
        assert_eq!(e.variable.as_deref(), Some("FENCEGATE_NOPE__X"), "{e}");
        // A secret's value is never repeated, even when it is the wrong type.
        let e = layered(
            "[keys.a]\naccess_key_id = \"A\"\n",
            &[("FENCEGATE_KEYS__A__SECRET_ACCESS_KEY", "[\"hunter2\"]")],
        )
        .unwrap_err();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }

    #[test]
    fn a_backend_secret_is_never_repeated_in_an_error() {
        // serde reads [backends.NAME] whole (it is tagged by `kind`), so its errors carry the
        // table's path only, not the secret field's name.
        let backend = |secret: &str| {
            format!("[backends.store]\nkind = \"s3\"\naccess_key_id = \"A\"\nsecret_access_key = {secret}\n")
        };
        for secret in ["123456789", "12.5", "[\"hunter2\"]", "{ a = \"hunter2\" }"] {
            let e = parse(&backend(secret), "f.toml").unwrap_err();
            let text = e.to_string();
            assert!(
                !text.contains("123456789") && !text.contains("hunter2") && !text.contains("12.5"),
                "{text}"
            );
            if secret == "123456789" {
                // It still names the place of the secret, and what is expected there.
                assert_eq!(e.location.map(|l| l.0), Some(4), "{text}");
                assert!(text.contains("expected a string"), "{text}");
            }
        }
        let e = layered(
            &backend("\"s\""),
            &[(
                "FENCEGATE_BACKENDS__STORE__SECRET_ACCESS_KEY",
                "[987654321]",
            )],
        )
        .unwrap_err();
        assert!(!e.to_string().contains("987654321"), "{e}");
        // A value where a table of secrets belongs is taken for a secret.
        for var in [
            "FENCEGATE_KEYS__ETL",
            "FENCEGATE_BACKENDS__STORE",
            "FENCEGATE_S3__KEYS__ETL",
        ] {
            let e = layered("", &[(var, "hunter2")]).unwrap_err();
            assert!(!e.to_string().contains("hunter2"), "{e}");
            assert_eq!(e.variable.as_deref(), Some(var), "{e}");
        }
        // Secrets that may not be inline: refused by name, their values not repeated.
        for text in [
            "[fence_store]\nkind = \"etcd\"\npassword = \"hunter2\"\n",
            "[admin]\nbearer_token = \"hunter2\"\n",
            "[backends.store]\nkind = \"s3\"\npassword = 123456789\n",
        ] {
            let e = parse(text, "f.toml").unwrap_err();
            let text = e.to_string();
            assert!(
                !text.contains("hunter2") && !text.contains("123456789"),
                "{text}"
            );
        }
        // A value that is no secret is still shown.
        let e = parse(
            "[backends.store]\nkind = \"s3\"\nsecret_access_key = \"s\"\nregion = 42\n",
            "f.toml",
        )
        .unwrap_err();
        assert!(e.to_string().contains("42"), "{e}");
    }

    #[test]
    fn bad_bucket_names_and_values_are_refused() {
        assert!(parse("[buckets.A_B]\n", "f").is_err());
        assert!(parse("[buckets.ab]\n", "f").is_err());
        assert!(parse(
            "[buckets.logs]\nscope = \"prefix\"\nprefix_segments = 0\n",
            "f"
        )
        .is_err());
        assert!(parse("[server]\nlisten = \"localhost\"\n", "f").is_err());
        assert!(parse("[server]\nmax_body_bytes = 0\n", "f").is_err());
        assert!(parse("[server]\nmax_body_bytes = -1\n", "f").is_err());
    }

    #[test]
    fn example_files_are_valid() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/config");
        let mut seen = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
                seen += 1;
            }
        }
        assert!(seen >= 4, "expected the documented file and three examples");
    }
}
