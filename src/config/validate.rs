//! Validation: configuration text (and the environment's variables over it) parsed into a
//! [`Config`], one section at a time, every refusal naming its place (the file's
//! `line:column`, or the variable) and what to do.

use super::layers::{self, EnvLayer, Origins, Place};
use super::model::{AdminConfig, RawConfig};
use super::*;

mod backends;
use backends::backends;

/// Parses and validates configuration text; `name` is used in messages.
pub fn parse(text: &str, name: &str) -> Result<Config, ConfigError> {
    parse_layered(text, name, &EnvLayer::none())
}

/// Where each refused value sits, for its message.
struct Places<'a> {
    name: &'a str,
    origins: Origins<'a>,
}

impl Places<'_> {
    /// A refusal of the value (or, with `key`, the field name) at `path`.
    fn at(&self, path: &[&str], key: bool, message: String, fix: String) -> ConfigError {
        let mut e = ConfigError {
            source_name: self.name.to_string(),
            location: None,
            variable: None,
            message,
            fix,
        };
        match self.origins.place(path, key) {
            Place::File(line, col) => e.location = Some((line, col)),
            Place::Variable(v) => e.variable = Some(v),
            Place::Nowhere => {}
        }
        e
    }

    fn err(&self, path: &[&str], message: String, fix: String) -> ConfigError {
        self.at(path, false, message, fix)
    }

    fn owned(&self, path: &[String], message: String, fix: String) -> ConfigError {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        self.at(&path, false, message, fix)
    }
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
    let places = Places {
        name,
        origins: Origins::new(text, env),
    };
    let figment = layers::figment(text, env);
    let raw: RawConfig = figment.extract().map_err(|e| {
        let (path, key, message) = layers::figment_problem(e, &figment);
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        places.at(
            &path,
            key,
            message,
            "correct the value or field name there; every field is documented in config/fencegate.toml (durations: 30 or \"30s\"; sizes: 5368709120 or \"5GiB\")".into(),
        )
    })?;
    let listen = server(&raw.server, &places)?;
    if !(1..=1_000_000).contains(&raw.leases.max_live_per_key) {
        return Err(places.err(
            &["leases", "max_live_per_key"],
            format!(
                "[leases] max_live_per_key is {}",
                raw.leases.max_live_per_key
            ),
            "set 1 to 1000000 live leases per access key; the default is 1000".into(),
        ));
    }
    let backends = backends(raw.backends, &places)?;
    let buckets = buckets(raw.buckets, &backends, &places)?;
    let bucket_defaults = bucket_defaults(raw.bucket_defaults, &backends, &places)?;
    let etcd = fence_store::check(
        &raw.fence_store,
        &backends,
        &buckets,
        bucket_defaults.as_ref(),
        &|v| std::env::var(v).ok(),
    )
    .map_err(|(path, message, fix)| places.owned(&path, message, fix))?;
    let s3 = raw.s3;
    let s3_listen = s3_gateway(&s3, &places)?;
    let (keys, warnings) = keys::table(&raw.keys, &s3, &|v| std::env::var(v).ok())
        .map_err(|(path, message, fix)| places.owned(&path, message, fix))?;
    let (admin_listen, admin_token) = admin(&raw.admin, &places)?;
    tls(&raw.server, &places)?;
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
        return Err(places.err(&["buckets", bucket.as_str()], message, fix));
    }
    if let Some((path, message, fix)) = config.own_dirs_conflict() {
        return Err(places.owned(&path, message, fix));
    }
    Ok(config)
}

/// The most `[server] max_unverified_body_bytes` may be: 4,096 bodies of the largest size.
const MAX_UNVERIFIED_BUDGET: usize = 4096 * model::MAX_UNVERIFIED_BODY;

/// `[server]`: the listen address, and the sizes and durations that may not be zero.
fn server(raw: &ServerConfig, places: &Places) -> Result<SocketAddr, ConfigError> {
    let listen: SocketAddr = raw.listen.parse().map_err(|_| {
        places.err(
            &["server", "listen"],
            format!(
                "[server] listen = {:?} is not an IP address and port",
                raw.listen
            ),
            "write it as \"127.0.0.1:8080\" or \"0.0.0.0:8080\"".into(),
        )
    })?;
    if raw.max_body_bytes == 0 {
        return Err(places.err(
            &["server", "max_body_bytes"],
            "[server] max_body_bytes is 0".into(),
            "set a positive size, e.g. \"5GiB\" (5368709120 bytes)".into(),
        ));
    }
    if !(model::MAX_UNVERIFIED_BODY..=MAX_UNVERIFIED_BUDGET)
        .contains(&raw.max_unverified_body_bytes)
    {
        return Err(places.err(
            &["server", "max_unverified_body_bytes"],
            format!(
                "[server] max_unverified_body_bytes is {}, outside 1 MiB (one such body) to 4 GiB (what it bounds is memory anyone with a key id can make fencegate hold)",
                raw.max_unverified_body_bytes
            ),
            "set \"1MiB\" to \"4GiB\"; the default is \"64MiB\"".into(),
        ));
    }
    if raw.body_idle_timeout_secs == 0 {
        return Err(places.err(
            &["server", "body_idle_timeout_secs"],
            "[server] body_idle_timeout_secs is 0".into(),
            "set a positive duration, e.g. 30 or \"30s\"".into(),
        ));
    }
    if !(60..=30 * 86400).contains(&raw.idempotency_ttl_secs) {
        return Err(places.err(
            &["server", "idempotency_ttl_secs"],
            format!(
                "[server] idempotency_ttl_secs is {}",
                raw.idempotency_ttl_secs
            ),
            "set it between 60 (a minute) and 2592000 (30 days); the default is 86400 (\"24h\"), as Stripe's".into(),
        ));
    }
    if !(1..=365 * 86400).contains(&raw.upload_expiry_secs) {
        return Err(places.err(
            &["server", "upload_expiry_secs"],
            format!(
                "[server] upload_expiry_secs is {}",
                raw.upload_expiry_secs
            ),
            "set it between 1 and 31536000 (a year): an incomplete multipart upload is aborted this long after its creation; the default is 86400 (\"24h\")".into(),
        ));
    }
    for (name, value) in [
        ("max_uploads_per_key", raw.max_uploads_per_key),
        ("max_uploads_per_bucket", raw.max_uploads_per_bucket),
    ] {
        if !(1..=1_000_000).contains(&value) {
            return Err(places.err(
                &["server", name],
                format!("[server] {name} is {value}"),
                format!(
                    "set 1 to 1000000 open multipart uploads; the default is {}",
                    if name == "max_uploads_per_key" {
                        model::DEFAULT_MAX_UPLOADS_PER_KEY
                    } else {
                        model::DEFAULT_MAX_UPLOADS_PER_BUCKET
                    }
                ),
            ));
        }
    }

    Ok(listen)
}

/// `[server.tls]`: both PEM files readable.
fn tls(raw: &ServerConfig, places: &Places) -> Result<(), ConfigError> {
    if let Some(tls) = &raw.tls {
        for (what, path) in [("cert_file", &tls.cert_file), ("key_file", &tls.key_file)] {
            if let Err(e) = std::fs::metadata(path) {
                return Err(places.err(
                    &["server", "tls", what],
                    format!("[server.tls] {what} {} cannot be read: {e}", path.display()),
                    "name PEM files that exist and that fencegate may read".into(),
                ));
            }
        }
    }

    Ok(())
}

/// `[buckets.*]`: names, their backends, and the fields their backend allows. The bucket
/// `default` when none is configured.
fn buckets(
    raw: BTreeMap<String, BucketPolicy>,
    backends: &BTreeMap<String, BackendConfig>,
    places: &Places,
) -> Result<BTreeMap<String, BucketPolicy>, ConfigError> {
    let mut buckets = BTreeMap::new();
    for (name, policy) in raw {
        if let Some(why) = bucket_name_problem(&name) {
            return Err(places.at(
                &["buckets", name.as_str()],
                true,
                format!("bucket name {name:?} {why}"),
                "use 3-63 characters: lowercase letters, digits, `-` and `.`, starting and ending with a letter or digit".into(),
            ));
        }
        if !backends.contains_key(&policy.backend) {
            let known: Vec<_> = backends.keys().cloned().collect();
            return Err(places.err(
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
        let is_s3 = matches!(
            backends[&policy.backend],
            BackendConfig::S3(_) | BackendConfig::Azure(_) | BackendConfig::Gcs(_)
        );
        if !is_s3 && (policy.backend_bucket.is_some() || !policy.backend_prefix.is_empty()) {
            let field = if policy.backend_bucket.is_some() {
                "backend_bucket"
            } else {
                "backend_prefix"
            };
            return Err(places.err(
                &["buckets", name.as_str(), field],
                format!("bucket {name:?} sets backend_bucket or backend_prefix, but its backend {:?} is a local directory (fs)", policy.backend),
                "remove them; an fs backend keeps each bucket in its own directory".into(),
            ));
        }
        if policy.scope == ScopeKind::Prefix && policy.prefix_segments == 0 {
            return Err(places.err(
                &["buckets", name.as_str(), "prefix_segments"],
                format!("bucket {name:?} has scope = \"prefix\" with prefix_segments = 0"),
                "set prefix_segments to 1 or more (1 fences `tenant/` in `tenant/file`)".into(),
            ));
        }
        if let Some((field, what, fix)) = super::cors::problem(&policy.cors) {
            return Err(places.err(
                &["buckets", name.as_str(), "cors"],
                format!("bucket {name:?} {what} ({field})"),
                fix,
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

    Ok(buckets)
}

/// `[bucket_defaults]`, the policy of buckets created through the S3 API: a backend that
/// can hold them.
fn bucket_defaults(
    raw: Option<BucketPolicy>,
    backends: &BTreeMap<String, BackendConfig>,
    places: &Places,
) -> Result<Option<BucketPolicy>, ConfigError> {
    Ok(match raw {
        None => None,
        Some(policy) => {
            let backend_fix = "name a backend from [backends], and for s3 the store bucket that will hold created buckets";
            let problem = match backends.get(&policy.backend) {
                None => Some(("backend", format!("uses backend {:?}, which is not defined", policy.backend), backend_fix.into())),
                Some(BackendConfig::S3(_) | BackendConfig::Azure(_) | BackendConfig::Gcs(_)) if policy.backend_bucket.is_none() => Some(("backend", 
                    "uses an s3 backend but sets no backend_bucket: created buckets live in that store bucket, under backend_prefix + the bucket's name + \"/\"".into(), backend_fix.into()),
                ),
                Some(BackendConfig::Fs { .. }) if policy.backend_bucket.is_some() || !policy.backend_prefix.is_empty() => {
                    Some((if policy.backend_bucket.is_some() { "backend_bucket" } else { "backend_prefix" }, "sets backend_bucket or backend_prefix, but its backend is a local directory (fs)".into(), backend_fix.into()))
                }
                _ => super::cors::problem(&policy.cors)
                    .map(|(field, what, fix)| ("cors", format!("{what} ({field})"), fix)),
            };
            if let Some((field, problem, fix)) = problem {
                return Err(places.err(
                    &["bucket_defaults", field],
                    format!("[bucket_defaults] {problem}"),
                    fix,
                ));
            }
            Some(policy)
        }
    })
}

/// `[s3]`: the gateway's own listener, its part limit and its virtual-host domain.
fn s3_gateway(raw: &S3GatewayConfig, places: &Places) -> Result<Option<SocketAddr>, ConfigError> {
    let s3_listen = match &raw.listen {
        None => None,
        Some(l) => Some(l.parse::<SocketAddr>().map_err(|_| {
            places.err(
                &["s3", "listen"],
                format!("[s3] listen = {l:?} is not an IP address and port"),
                "write it as \"127.0.0.1:9000\", or remove it to serve S3 on the native listener"
                    .into(),
            )
        })?),
    };
    if raw.max_parts == 0 || raw.max_parts > 10_000 {
        return Err(places.err(
            &["s3", "max_parts"],
            format!("[s3] max_parts = {} is outside 1..=10000", raw.max_parts),
            "use at most 10000, S3's own limit (the default)".into(),
        ));
    }
    if let Some(domain) = &raw.domain {
        if let Some(problem) = s3_domain_problem(domain) {
            return Err(places.err(
                &["s3", "domain"],
                format!("[s3] domain = {domain:?} {problem}"),
                "write a domain name like \"s3.example.com\" (no scheme, port or path), or remove it for path-style requests only".into(),
            ));
        }
    }
    Ok(s3_listen)
}

/// `[admin]`: its own listener and its bearer token.
fn admin(
    raw: &AdminConfig,
    places: &Places,
) -> Result<(Option<SocketAddr>, Option<AdminToken>), ConfigError> {
    let admin_listen = match &raw.listen {
        None => None,
        Some(l) => Some(l.parse::<SocketAddr>().map_err(|_| {
            places.err(
                &["admin", "listen"],
                format!("[admin] listen = {l:?} is not an IP address and port"),
                "write it as \"127.0.0.1:9091\", or remove it to serve /metrics and /admin on the native listener".into(),
            )
        })?),
    };
    let token_field = if raw.bearer_token_file.is_some() {
        "bearer_token_file"
    } else {
        "bearer_token_env"
    };
    let admin_token = admin_token(raw, &|v| std::env::var(v).ok())
        .map_err(|message| places.err(&["admin", token_field], format!("[admin] {message}"), format!("generate one with `openssl rand -hex 32` into a file readable by fencegate only, and name it in bearer_token_file (or bearer_token_env); at least {MIN_ADMIN_TOKEN_LEN} characters")))?;
    Ok((admin_listen, admin_token))
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
            env(var).ok_or_else(|| format!("names bearer_token_env {}, which is not set in the environment fencegate was started with (a reload sees that environment, not variables set since: use bearer_token_file to change the token by a reload)", super::layers::shown_var(var)))?
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
