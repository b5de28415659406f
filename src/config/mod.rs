//! Configuration: reads the TOML file (or the embedded default), validates it, and hands the
//! rest of fencegate a typed, checked [`Config`]. Errors name the file, the line and the fix.

mod fence_store;
pub mod keys;
pub mod layers;
mod model;
mod units;

pub use fence_store::EtcdConfig;

pub use keys::{Key, Permission};
pub use model::{
    BackendConfig, BucketPolicy, BypassPolicy, FenceStoreConfig, FenceStoreKind, FencingMode,
    LeaseConfig, LogFormat, S3BackendConfig, S3GatewayConfig, S3Key, ScopeKind, ServerConfig,
    TokenOrder, DEFAULT_UNVERIFIED_BODY_BYTES, MAX_UNVERIFIED_BODY,
};

use layers::{EnvLayer, Origins, Place};
use model::RawConfig;
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
        let mut config = parse_layered(&text, &name, &env)?
            .with_overrides(self.listen, self.data_dir.clone())
            .with_scope_change_accepted(&self.accept_scope_change);
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

    /// A human-readable summary of the effective policies (for `check-config` and start-up).
    pub fn describe(&self) -> String {
        let mut out = format!(
            "source: {}\nlisten: {}\ndata_dir: {}\nfence store: {}\nmax body: {} bytes\n",
            self.source,
            self.listen,
            self.server.data_dir.display(),
            match &self.etcd {
                None => format!("rocksdb at {}", self.fence_store_path().display()),
                Some(e) => format!(
                    "etcd at {} under prefix {:?} (shared by every instance)",
                    e.endpoints.join(", "),
                    e.prefix
                ),
            },
            self.server.max_body_bytes
        );
        for (name, b) in &self.backends {
            match b {
                BackendConfig::Fs { root } => {
                    out += &format!("backend {name}: fs at {}\n", self.fs_root(root).display())
                }
                BackendConfig::S3(s3) => {
                    let credentials = match &s3.access_key_id {
                        Some(id) => format!("static key {id}"),
                        None => "the SDK's default chain".into(),
                    };
                    out += &format!(
                        "backend {name}: s3 at {} (region {}, credentials from {credentials}{})\n",
                        s3.endpoint.as_deref().unwrap_or("AWS"),
                        s3.region,
                        [
                            (
                                s3.unsafe_no_conditional_writes,
                                ", UNSAFE: conditional writes not required"
                            ),
                            (
                                s3.unsafe_unconditional_deletes,
                                ", UNSAFE: conditional deletes not required"
                            ),
                        ]
                        .iter()
                        .filter(|(on, _)| *on)
                        .map(|(_, what)| *what)
                        .collect::<String>()
                    )
                }
            }
        }
        for (name, p) in &self.buckets {
            let scope = match p.scope {
                ScopeKind::Prefix => format!("prefix (first {} segments)", p.prefix_segments),
                other => format!("{other:?}").to_lowercase(),
            };
            out += &format!(
                "bucket {name}: backend={} fencing={:?} scope={scope} tokens={:?} fenced_deletes={} on_bypass={:?}\n",
                p.backend, p.fencing, p.tokens, p.fenced_deletes, p.on_bypass
            );
        }
        match &self.bucket_defaults {
            Some(p) => {
                out += &format!(
                "buckets created through S3: backend={} fencing={:?} (from [bucket_defaults])\n",
                p.backend, p.fencing
            )
            }
            None => out += "buckets created through S3: refused (no [bucket_defaults])\n",
        }
        if self.s3.enabled {
            let keys: Vec<&str> = self.keys.keys().map(String::as_str).collect();
            out += &format!(
                "s3 gateway: on {}{}, region {}, keys {}\n",
                self.s3_listen
                    .map_or("the native listener".to_string(), |a| a.to_string()),
                self.s3
                    .domain
                    .as_deref()
                    .map(|d| format!(", virtual hosts *.{d}"))
                    .unwrap_or_default(),
                self.s3.region,
                if keys.is_empty() {
                    "none: development mode (anonymous access and the key fencegate / fencegate-dev-secret, loopback only)".to_string()
                } else {
                    keys.join(", ")
                }
            );
        } else {
            out += "s3 gateway: off\n";
        }
        out += &format!(
            "leases: lease-bound S3 credentials last {} s past their lease\n",
            self.leases.credential_grace_secs
        );
        out += &match &self.server.tls {
            Some(t) => format!(
                "tls: on every listener, certificate {} (reloaded on SIGHUP)\n",
                t.cert_file.display()
            ),
            None => "tls: off (plain HTTP)\n".to_string(),
        };
        out += &format!(
            "admin: /metrics and /admin on {}; opened by {}\n",
            self.admin_listen
                .map_or("the native listener".to_string(), |a| a.to_string()),
            match (self.keys.is_empty(), self.admin_token.is_some()) {
                (true, false) => "anyone (development mode)",
                (true, true) => "the bearer token",
                (false, false) => "keys with admin = true",
                (false, true) => "the bearer token or keys with admin = true",
            }
        );
        out
    }
}

/// Where a bucket's objects live, for telling whether two buckets could reach the same object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Namespace {
    /// Keys starting with `prefix` in store bucket `bucket` of the store at `store` (its
    /// endpoint, or "AWS").
    S3 {
        store: String,
        bucket: String,
        prefix: String,
    },
    /// Everything below a directory.
    Fs { dir: PathBuf },
}

impl Namespace {
    /// Whether every object of `other` lies in this namespace (the same store, and this prefix
    /// or directory a prefix of the other's; an empty prefix holds the whole store bucket).
    pub fn contains(&self, other: &Namespace) -> bool {
        match (self, other) {
            (
                Namespace::S3 {
                    store,
                    bucket,
                    prefix,
                },
                Namespace::S3 {
                    store: s2,
                    bucket: b2,
                    prefix: p2,
                },
            ) => store == s2 && bucket == b2 && p2.starts_with(prefix.as_str()),
            (Namespace::Fs { dir }, Namespace::Fs { dir: d2 }) => d2.starts_with(dir),
            _ => false,
        }
    }

    /// Whether the two can hold the same object: one contains the other.
    pub fn overlaps(&self, other: &Namespace) -> bool {
        self.contains(other) || other.contains(self)
    }
}

impl std::fmt::Display for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Namespace::S3 {
                store,
                bucket,
                prefix,
            } if prefix.is_empty() => write!(f, "all of store bucket {bucket} at {store}"),
            Namespace::S3 {
                store,
                bucket,
                prefix,
            } => write!(f, "prefix {prefix:?} of store bucket {bucket} at {store}"),
            Namespace::Fs { dir } => write!(f, "directory {}", dir.display()),
        }
    }
}

/// `path` made absolute and free of `.` and `..`, without touching the disk (it may not exist).
/// A path as the file system resolves it: the longest existing ancestor canonicalized
/// (symlinks followed), the rest appended lexically. Two spellings of one directory (a
/// symlink) then compare equal.
fn resolved_path(path: &Path) -> PathBuf {
    let lexical = lexical_absolute(path);
    let mut base = lexical.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(real) = std::fs::canonicalize(&base) {
            return rest.iter().rev().fold(real, |p, c| p.join(c));
        }
        match (base.file_name().map(|n| n.to_os_string()), base.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                base = parent.to_path_buf();
            }
            _ => return lexical,
        }
    }
}

/// An endpoint as the network resolves it: `scheme://ip:port` of its host's lowest address,
/// so that two spellings of one store (`localhost`, `127.0.0.1`) compare equal. A host that
/// does not resolve (no DNS where the config is checked) stays as written.
fn resolved_endpoint(endpoint: &str) -> String {
    // Parsed by hand: this module is also built into the config fuzz target, without `http`.
    let text = endpoint.trim_end_matches('/').to_ascii_lowercase();
    let Some((scheme, rest)) = text.split_once("://") else {
        return text;
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && p.bytes().all(|b| b.is_ascii_digit()) => {
            (h, p.parse::<u16>().ok())
        }
        _ => (authority, None),
    };
    let port = port.unwrap_or(if scheme == "https" { 443 } else { 80 });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match std::net::ToSocketAddrs::to_socket_addrs(&(host, port)) {
        Ok(addrs) => match addrs.map(|a| a.ip()).min() {
            Some(ip) => format!("{scheme}://{}{path}", SocketAddr::new(ip, port)),
            None => text,
        },
        Err(_) => text,
    }
}

fn lexical_absolute(path: &Path) -> PathBuf {
    use std::path::Component;
    let joined = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

impl Config {
    /// Where `bucket` (served under `policy`) keeps its objects.
    pub fn namespace(&self, bucket: &str, policy: &BucketPolicy) -> Namespace {
        match &self.backends[&policy.backend] {
            BackendConfig::Fs { root } => Namespace::Fs {
                dir: resolved_path(&self.fs_root(root).join(bucket)),
            },
            BackendConfig::S3(s3) => Namespace::S3 {
                store: s3
                    .endpoint
                    .as_deref()
                    .map_or("AWS".to_string(), resolved_endpoint),
                bucket: policy
                    .backend_bucket
                    .clone()
                    .unwrap_or_else(|| bucket.to_string()),
                prefix: policy.backend_prefix.clone(),
            },
        }
    }

    /// Where every bucket created through the S3 API lives: below this namespace.
    fn created_root(&self) -> Option<Namespace> {
        // Bucket "" is the root: the fs root directory, or the template's store prefix.
        let template = self.bucket_defaults.as_ref()?;
        Some(self.namespace("", template))
    }

    /// Refuses buckets whose namespaces overlap: two fence rows would guard one object, and a
    /// tombstone written through one bucket could be revived through the other. `created` are
    /// the buckets created through the S3 API (a configured bucket of the same name wins).
    pub fn check_namespaces(
        &self,
        created: &BTreeMap<String, BucketPolicy>,
    ) -> Result<(), ConfigError> {
        match self.namespace_conflict(created) {
            None => Ok(()),
            Some((_, message, fix)) => Err(ConfigError {
                source_name: self.source.clone(),
                location: None,
                variable: None,
                message,
                fix,
            }),
        }
    }

    /// The first overlap [`Config::check_namespaces`] refuses: the bucket it is found at, the
    /// problem and the fix.
    fn namespace_conflict(
        &self,
        created: &BTreeMap<String, BucketPolicy>,
    ) -> Option<(String, String, String)> {
        let mut all: Vec<(String, &str, Namespace)> = Vec::new();
        for (name, policy) in &self.buckets {
            all.push((format!("bucket {name}"), name, self.namespace(name, policy)));
        }
        for (name, policy) in created {
            if !self.buckets.contains_key(name) && self.backends.contains_key(&policy.backend) {
                all.push((
                    format!("bucket {name} (created through the S3 API)"),
                    name,
                    self.namespace(name, policy),
                ));
            }
        }
        for (i, (a, _, na)) in all.iter().enumerate() {
            for (b, bucket, nb) in &all[i + 1..] {
                if na.overlaps(nb) {
                    return Some((bucket.to_string(),
                        format!("{a} and {b} overlap in the store: {a} is {na}, {b} is {nb}, so one object would have two fences and a delete through one could be undone through the other"),
                        "give each its own place: backend_prefix values of which neither is a prefix of the other (an empty prefix takes the whole store bucket), a different backend_bucket, or a different fs root; then move the objects there".to_string(),
                    ));
                }
            }
        }
        if let Some(root) = self.created_root() {
            for (a, bucket, na) in &all {
                if na.contains(&root) {
                    return Some((bucket.to_string(),
                        format!("{a} is {na}, which holds every bucket [bucket_defaults] creates through the S3 API ({root}), so their objects would also be {a}'s"),
                        format!("give {a} a backend_prefix of its own that [bucket_defaults] does not use, or set [bucket_defaults] backend_prefix (or backend_bucket) to a place outside it"),
                    ));
                }
            }
        }
        None
    }

    /// Why a bucket named `name`, created with the `[bucket_defaults]` policy `policy`, cannot
    /// coexist with the buckets in `existing`: the first one it would overlap.
    pub fn overlap_with(
        &self,
        name: &str,
        policy: &BucketPolicy,
        existing: &BTreeMap<String, BucketPolicy>,
    ) -> Option<String> {
        let mine = self.namespace(name, policy);
        existing
            .iter()
            .filter(|(other, p)| other.as_str() != name && self.backends.contains_key(&p.backend))
            .find_map(|(other, p)| {
                let theirs = self.namespace(other, p);
                mine.overlaps(&theirs).then(|| {
                    format!("would be {mine}, which overlaps bucket {other} ({theirs}); choose a name whose place is not inside bucket {other}'s, or give bucket {other} a backend_prefix of its own")
                })
            })
    }
}

/// Parses and validates configuration text; `name` is used in messages.
pub fn parse(text: &str, name: &str) -> Result<Config, ConfigError> {
    parse_layered(text, name, &EnvLayer::none())
}

/// Parses configuration text with the variables of `env` layered over it, and validates the
/// result. Every refusal names its place: the file's `line:column`, or the variable.
pub fn parse_layered(text: &str, name: &str, env: &EnvLayer) -> Result<Config, ConfigError> {
    // The text's syntax first, with toml's own span: figment would keep only its message.
    if let Err(e) = toml_edit::ImDocument::parse(text) {
        return Err(ConfigError {
            source_name: name.to_string(),
            location: e.span().map(|s| layers::line_col(text, s.start)),
            variable: None,
            message: e.message().to_string(),
            fix: "correct the TOML syntax at that line; every field is documented in config/fencegate.toml".into(),
        });
    }
    let origins = Origins::new(text, env);
    let at = |path: &[&str], key: bool, message: String, fix: String| {
        let mut e = ConfigError {
            source_name: name.to_string(),
            location: None,
            variable: None,
            message,
            fix,
        };
        match origins.place(path, key) {
            Place::File(line, col) => e.location = Some((line, col)),
            Place::Variable(v) => e.variable = Some(v),
            Place::Nowhere => {}
        }
        e
    };
    let err = |path: &[&str], message: String, fix: String| at(path, false, message, fix);
    let owned = |path: &[String], message: String, fix: String| {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        at(&path, false, message, fix)
    };
    let raw: RawConfig = layers::figment(text, env).extract().map_err(|e| {
        let (path, key, message) = layers::figment_problem(e);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        at(
            &path,
            key,
            message,
            "correct the value or field name there; every field is documented in config/fencegate.toml (durations: 30 or \"30s\"; sizes: 5368709120 or \"5GiB\")".into(),
        )
    })?;

    let listen: SocketAddr = raw.server.listen.parse().map_err(|_| {
        err(
            &["server", "listen"],
            format!(
                "[server] listen = {:?} is not an IP address and port",
                raw.server.listen
            ),
            "write it as \"127.0.0.1:8080\" or \"0.0.0.0:8080\"".into(),
        )
    })?;
    if raw.server.max_body_bytes == 0 {
        return Err(err(
            &["server", "max_body_bytes"],
            "[server] max_body_bytes is 0".into(),
            "set a positive size, e.g. \"5GiB\" (5368709120 bytes)".into(),
        ));
    }
    if raw.server.max_unverified_body_bytes < model::MAX_UNVERIFIED_BODY {
        return Err(err(
            &["server", "max_unverified_body_bytes"],
            format!(
                "[server] max_unverified_body_bytes is {}, below the 1 MiB one such body may take",
                raw.server.max_unverified_body_bytes
            ),
            "set at least \"1MiB\"; the default is \"64MiB\"".into(),
        ));
    }
    if raw.server.body_idle_timeout_secs == 0 {
        return Err(err(
            &["server", "body_idle_timeout_secs"],
            "[server] body_idle_timeout_secs is 0".into(),
            "set a positive duration, e.g. 30 or \"30s\"".into(),
        ));
    }
    if !(60..=30 * 86400).contains(&raw.server.idempotency_ttl_secs) {
        return Err(err(
            &["server", "idempotency_ttl_secs"],
            format!(
                "[server] idempotency_ttl_secs is {}",
                raw.server.idempotency_ttl_secs
            ),
            "set it between 60 (a minute) and 2592000 (30 days); the default is 86400 (\"24h\"), as Stripe's".into(),
        ));
    }

    let mut backends = BTreeMap::new();
    for (name, b) in raw.backends {
        if !valid_backend_name(&name) {
            return Err(at(
                &["backends", name.as_str()],
                true,
                format!("backend name {name:?} is not allowed"),
                "use lowercase letters, digits, `-` and `_`".into(),
            ));
        }
        if let BackendConfig::S3(s3) = &b {
            let problem = if s3.access_key_id.is_some() != s3.secret_access_key.is_some() {
                Some((if s3.access_key_id.is_some() { "access_key_id" } else { "secret_access_key" }, "sets only one of access_key_id and secret_access_key", "set both, or neither to use the SDK's credential chain (AWS_ACCESS_KEY_ID, profiles, roles)"))
            } else if s3.multipart_threshold_bytes < 5 * 1024 * 1024
                || s3.multipart_threshold_bytes > 5 * 1024 * 1024 * 1024
            {
                Some((
                    "multipart_threshold_bytes",
                    "has multipart_threshold_bytes outside S3's part limits",
                    "use \"5MiB\" (5242880) to \"5GiB\" (5368709120); the default is \"8MiB\"",
                ))
            } else {
                [
                    ("read_attempts", u64::from(s3.read_attempts)),
                    ("connect_timeout_secs", s3.connect_timeout_secs),
                    ("read_timeout_secs", s3.read_timeout_secs),
                ]
                .iter()
                .find(|(_, v)| *v == 0)
                .map(|(field, _)| {
                    (
                        *field,
                        "has a zero timeout or attempt count",
                        "use positive values (defaults: connect 5 s, read 30 s, 3 attempts)",
                    )
                })
            };
            if let Some((field, what, fix)) = problem {
                return Err(err(
                    &["backends", name.as_str(), field],
                    format!("backend {name:?} {what}"),
                    fix.into(),
                ));
            }
        }
        backends.insert(name, b);
    }
    if backends.is_empty() {
        backends.insert(
            DEFAULT_BACKEND.to_string(),
            BackendConfig::Fs { root: None },
        );
    }

    let mut buckets = BTreeMap::new();
    for (name, policy) in raw.buckets {
        if let Some(why) = bucket_name_problem(&name) {
            return Err(at(
                &["buckets", name.as_str()],
                true,
                format!("bucket name {name:?} {why}"),
                "use 3-63 characters: lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit".into(),
            ));
        }
        if !backends.contains_key(&policy.backend) {
            let known: Vec<_> = backends.keys().cloned().collect();
            return Err(err(
                &["buckets", name.as_str(), "backend"],
                format!(
                    "bucket {name:?} uses backend {:?}, which is not defined",
                    policy.backend
                ),
                format!(
                    "set backend to one of {known:?}, or add a [backends.{}] table",
                    policy.backend
                ),
            ));
        }
        let is_s3 = matches!(backends[&policy.backend], BackendConfig::S3(_));
        if !is_s3 && (policy.backend_bucket.is_some() || !policy.backend_prefix.is_empty()) {
            let field = if policy.backend_bucket.is_some() {
                "backend_bucket"
            } else {
                "backend_prefix"
            };
            return Err(err(
                &["buckets", name.as_str(), field],
                format!("bucket {name:?} sets backend_bucket or backend_prefix, but its backend {:?} is not s3", policy.backend),
                "remove them; an fs backend keeps each bucket in its own directory".into(),
            ));
        }
        if policy.scope == ScopeKind::Prefix && policy.prefix_segments == 0 {
            return Err(err(
                &["buckets", name.as_str(), "prefix_segments"],
                format!("bucket {name:?} has scope = \"prefix\" with prefix_segments = 0"),
                "set prefix_segments to 1 or more (1 fences `tenant/` in `tenant/file`)".into(),
            ));
        }
        buckets.insert(name, policy);
    }
    if buckets.is_empty() {
        let backend = backends.keys().next().cloned().unwrap_or_default();
        buckets.insert(
            DEFAULT_BUCKET.to_string(),
            BucketPolicy {
                backend,
                ..BucketPolicy::default()
            },
        );
    }

    let bucket_defaults = match raw.bucket_defaults {
        None => None,
        Some(policy) => {
            let problem = match backends.get(&policy.backend) {
                None => Some(("backend", format!("uses backend {:?}, which is not defined", policy.backend))),
                Some(BackendConfig::S3(_)) if policy.backend_bucket.is_none() => Some(("backend", 
                    "uses an s3 backend but sets no backend_bucket: created buckets live in that store bucket, under backend_prefix + the bucket's name + \"/\"".into()),
                ),
                Some(BackendConfig::Fs { .. }) if policy.backend_bucket.is_some() || !policy.backend_prefix.is_empty() => {
                    Some((if policy.backend_bucket.is_some() { "backend_bucket" } else { "backend_prefix" }, "sets backend_bucket or backend_prefix, but its backend is not s3".into()))
                }
                _ => None,
            };
            if let Some((field, problem)) = problem {
                return Err(err(
                    &["bucket_defaults", field],
                    format!("[bucket_defaults] {problem}"),
                    "name a backend from [backends], and for s3 the store bucket that will hold created buckets".into(),
                ));
            }
            Some(policy)
        }
    };
    let etcd = fence_store::check(
        &raw.fence_store,
        &backends,
        &buckets,
        bucket_defaults.as_ref(),
        &|v| std::env::var(v).ok(),
    )
    .map_err(|(path, message, fix)| owned(&path, message, fix))?;
    let s3 = raw.s3;
    let s3_listen = match &s3.listen {
        None => None,
        Some(l) => Some(l.parse::<SocketAddr>().map_err(|_| {
            err(
                &["s3", "listen"],
                format!("[s3] listen = {l:?} is not an IP address and port"),
                "write it as \"127.0.0.1:9000\", or remove it to serve S3 on the native listener"
                    .into(),
            )
        })?),
    };
    if s3.max_parts == 0 || s3.max_parts > 10_000 {
        return Err(err(
            &["s3", "max_parts"],
            format!("[s3] max_parts = {} is outside 1..=10000", s3.max_parts),
            "use at most 10000, S3's own limit (the default)".into(),
        ));
    }
    if let Some(domain) = &s3.domain {
        if let Some(problem) = s3_domain_problem(domain) {
            return Err(err(
                &["s3", "domain"],
                format!("[s3] domain = {domain:?} {problem}"),
                "write a domain name like \"s3.example.com\" (no scheme, port or path), or remove it for path-style requests only".into(),
            ));
        }
    }
    let (keys, warnings) = keys::table(&raw.keys, &s3, &|v| std::env::var(v).ok())
        .map_err(|(path, message, fix)| owned(&path, message, fix))?;
    let admin_listen = match &raw.admin.listen {
        None => None,
        Some(l) => Some(l.parse::<SocketAddr>().map_err(|_| {
            err(
                &["admin", "listen"],
                format!("[admin] listen = {l:?} is not an IP address and port"),
                "write it as \"127.0.0.1:9091\", or remove it to serve /metrics and /admin on the native listener".into(),
            )
        })?),
    };
    let token_field = if raw.admin.bearer_token_file.is_some() {
        "bearer_token_file"
    } else {
        "bearer_token_env"
    };
    let admin_token = admin_token(&raw.admin, &|v| std::env::var(v).ok())
        .map_err(|message| err(&["admin", token_field], format!("[admin] {message}"), format!("generate one with `openssl rand -hex 32` into a file readable by fencegate only, and name it in bearer_token_file (or bearer_token_env); at least {MIN_ADMIN_TOKEN_LEN} characters")))?;
    if let Some(tls) = &raw.server.tls {
        for (what, path) in [("cert_file", &tls.cert_file), ("key_file", &tls.key_file)] {
            if let Err(e) = std::fs::metadata(path) {
                return Err(err(
                    &["server", "tls", what],
                    format!("[server.tls] {what} {} cannot be read: {e}", path.display()),
                    "name PEM files that exist and that fencegate may read".into(),
                ));
            }
        }
    }

    let config = Config {
        source: name.to_string(),
        server: raw.server,
        listen,
        fence_store: raw.fence_store,
        etcd,
        backends,
        buckets,
        s3,
        bucket_defaults,
        leases: raw.leases,
        s3_listen,
        accept_scope_change: Default::default(),
        keys,
        warnings,
        admin_listen,
        admin_token,
        sources: Sources::default(),
    };
    if let Some((bucket, message, fix)) = config.namespace_conflict(&BTreeMap::new()) {
        return Err(err(&["buckets", bucket.as_str()], message, fix));
    }
    Ok(config)
}

/// Why `[s3] domain` cannot name the virtual hosts' base domain, if it cannot.
pub fn s3_domain_problem(domain: &str) -> Option<&'static str> {
    if domain.is_empty() {
        return Some("is empty");
    }
    if domain.contains([':', '/', ' ']) {
        return Some("is not a domain name: it has a scheme, a port, a path or a space");
    }
    None
}

/// The admin bearer token from its file or variable (at most one of them).
fn admin_token(
    admin: &model::AdminConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<AdminToken>, String> {
    let token = match (&admin.bearer_token_file, &admin.bearer_token_env) {
        (None, None) => return Ok(None),
        (Some(_), Some(_)) => {
            return Err("sets both bearer_token_file and bearer_token_env; keep one".into())
        }
        (Some(path), None) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read bearer_token_file {}: {e}", path.display()))?,
        (None, Some(var)) => {
            env(var).ok_or_else(|| format!("names bearer_token_env {var:?}, which is not set"))?
        }
    };
    let token = token.trim().to_string();
    if token.len() < MIN_ADMIN_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!(
            "the bearer token must be at least {MIN_ADMIN_TOKEN_LEN} printable characters without spaces"
        ));
    }
    Ok(Some(AdminToken(token)))
}

fn valid_backend_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_')
}

/// S3's bucket naming rules, so the same names work on the S3 gateway later.
pub fn bucket_name_problem(name: &str) -> Option<&'static str> {
    if name.len() < 3 || name.len() > 63 {
        return Some("must be 3 to 63 characters long");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
    {
        return Some("may only contain lowercase letters, digits, `-` and `.`");
    }
    let edge_ok = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if !edge_ok(name.as_bytes()[0]) || !edge_ok(name.as_bytes()[name.len() - 1]) {
        return Some("must start and end with a letter or digit");
    }
    if name.contains("..") {
        return Some("may not contain `..`");
    }
    None
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
                ("FENCEGATE_KEYS__ETL__SECRET_ACCESS_KEY", "0123"),
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
            ("12345", "0123")
        );
        assert!(key.allows(Permission::Read, "logs-1"));
        // A secret never reaches the description.
        assert!(!c.describe().contains("0123"));
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
                "[keys.a]\naccess_key_id = \"A\"\nsecret_access_key = \"s\"\n[keys.b]\naccess_key_id = \"A\"\nsecret_access_key = \"t\"\n",
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
