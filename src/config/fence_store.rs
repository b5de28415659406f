//! `[fence_store]`: which table holds the fences, checked. RocksDB (the default) serves one
//! instance; etcd lets several instances share one table, which holds only when every commit's
//! store request can be bounded in time, so every bucket must then live on an s3 backend
//! (whose store the start-up probe checks for refusing expired presigned requests) with
//! conditional writes, and fence one object per scope (docs/design.md, "The cluster commit
//! protocol").

use super::model::{BackendConfig, BucketPolicy, FenceStoreConfig, FenceStoreKind, ScopeKind};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A checked etcd connection (`kind = "etcd"`).
#[derive(Clone)]
pub struct EtcdConfig {
    pub endpoints: Vec<String>,
    pub prefix: String,
    /// User and password; the password is never printed.
    pub user: Option<(String, String)>,
    pub ca_file: Option<PathBuf>,
    pub identity: Option<(PathBuf, PathBuf)>,
    pub timeout_ms: u64,
    pub intent_ttl_secs: u64,
    pub store_apply_secs: u64,
    pub max_clock_skew_ms: u64,
}

impl std::fmt::Debug for EtcdConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdConfig")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .field("ca_file", &self.ca_file)
            .field("identity", &self.identity)
            .field("timeout_ms", &self.timeout_ms)
            .field("intent_ttl_secs", &self.intent_ttl_secs)
            .field("store_apply_secs", &self.store_apply_secs)
            .field("max_clock_skew_ms", &self.max_clock_skew_ms)
            .finish()
    }
}

/// Where a problem is (a key path), the problem and its fix.
type Problem = (Vec<String>, String, String);

fn at(field: &str) -> Vec<String> {
    vec!["fence_store".into(), field.into()]
}

/// `what` is `bucket "NAME"` or `[bucket_defaults]`.
fn bucket_at(what: &str, field: &str) -> Vec<String> {
    match what.strip_prefix("bucket ") {
        Some(quoted) => vec![
            "buckets".into(),
            quoted.trim_matches('"').into(),
            field.into(),
        ],
        None => vec!["bucket_defaults".into(), field.into()],
    }
}

/// Checks `[fence_store]` against the backends and buckets it must serve.
pub fn check(
    raw: &FenceStoreConfig,
    backends: &BTreeMap<String, BackendConfig>,
    buckets: &BTreeMap<String, BucketPolicy>,
    bucket_defaults: Option<&BucketPolicy>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<EtcdConfig>, Problem> {
    let etcd_only = [
        ("endpoints", !raw.endpoints.is_empty()),
        ("username", raw.username.is_some()),
        ("password_file", raw.password_file.is_some()),
        ("password_env", raw.password_env.is_some()),
        ("ca_file", raw.ca_file.is_some()),
        ("cert_file", raw.cert_file.is_some()),
        ("key_file", raw.key_file.is_some()),
    ];
    if raw.kind == FenceStoreKind::Rocksdb {
        if let Some((name, _)) = etcd_only.iter().find(|(_, set)| *set) {
            return Err((at(name),
                format!("[fence_store] sets {name}, an etcd setting, but kind is \"rocksdb\""),
                "set kind = \"etcd\" to share the table between instances, or remove the etcd settings".into(),
            ));
        }
        return Ok(None);
    }
    if !cfg!(feature = "cluster") {
        return Err((
            at("kind"),
            super::not_built("cluster", "[fence_store] kind = \"etcd\""),
            format!(
                "{}; or use kind = \"rocksdb\" for one instance",
                super::rebuild_with("cluster")
            ),
        ));
    }
    if raw.path.is_some() {
        return Err((
            at("path"),
            "[fence_store] sets path, a rocksdb setting, but kind is \"etcd\"".into(),
            "remove path: the table lives in etcd, under prefix".into(),
        ));
    }
    if raw.endpoints.is_empty() {
        return Err((at("endpoints"),
            "[fence_store] kind = \"etcd\" names no endpoints".into(),
            "list the members' client URLs: endpoints = [\"http://10.0.0.1:2379\", \"http://10.0.0.2:2379\", \"http://10.0.0.3:2379\"]".into(),
        ));
    }
    if let Some(bad) = raw
        .endpoints
        .iter()
        .find(|e| !(e.starts_with("http://") || e.starts_with("https://")) || e.len() > 512)
    {
        return Err((
            at("endpoints"),
            format!("[fence_store] endpoint {bad:?} is not an http:// or https:// URL"),
            "write each endpoint as a URL, e.g. \"http://127.0.0.1:2379\"".into(),
        ));
    }
    if raw.prefix.is_empty() || raw.prefix.len() > 128 || raw.prefix.chars().any(char::is_control) {
        return Err((
            at("prefix"),
            format!(
                "[fence_store] prefix {:?} is empty, too long or has control characters",
                raw.prefix
            ),
            "use a short printable prefix ending in `/`, e.g. \"fencegate/\" (the default)".into(),
        ));
    }
    if !(100..=60_000).contains(&raw.timeout_ms) {
        return Err((
            at("timeout_ms"),
            format!(
                "[fence_store] timeout_ms = {} is outside 100..=60000",
                raw.timeout_ms
            ),
            "use a few seconds (the default is 3000)".into(),
        ));
    }
    if !(2..=300).contains(&raw.intent_ttl_secs) {
        return Err((at("intent_ttl_secs"),
            format!(
                "[fence_store] intent_ttl_secs = {} is outside 2..=300",
                raw.intent_ttl_secs
            ),
            "use a few seconds more than a commit takes (the default is 10): an instance that dies mid-commit holds its object back this long".into(),
        ));
    }
    if raw.store_apply_secs > 3600 {
        return Err((at("store_apply_secs"),
            format!(
                "[fence_store] store_apply_secs = {} is above 3600",
                raw.store_apply_secs
            ),
            "use the longest time the store takes to apply your largest commit (a multipart completion), with a margin (the default is 30)".into(),
        ));
    }
    if raw.max_clock_skew_ms > 60_000 {
        return Err((at("max_clock_skew_ms"),
            format!(
                "[fence_store] max_clock_skew_ms = {} is above 60000",
                raw.max_clock_skew_ms
            ),
            "keep the instances' and the store's clocks in step with NTP and use a few seconds (the default is 2000)".into(),
        ));
    }
    let password = match (&raw.password_file, &raw.password_env) {
        (Some(_), Some(_)) => {
            return Err((
                at("password_env"),
                "[fence_store] sets both password_file and password_env".into(),
                "keep one".into(),
            ))
        }
        (Some(path), None) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| {
                    (
                        at("password_file"),
                        format!(
                            "[fence_store] cannot read password_file {}: {e}",
                            path.display()
                        ),
                        "name a file fencegate may read, holding the etcd user's password".into(),
                    )
                })?
                .trim_end_matches(['\r', '\n'])
                .to_string(),
        ),
        (None, Some(var)) => Some(env(var).ok_or_else(|| {
            (
                at("password_env"),
                format!(
                    "[fence_store] names password_env {}, which is not set",
                    super::layers::shown_var(var)
                ),
                format!("export {var} with the etcd user's password, or use password_file"),
            )
        })?),
        (None, None) => None,
    };
    let user = match (&raw.username, password) {
        (Some(u), Some(p)) => Some((u.clone(), p)),
        (None, None) => None,
        _ => return Err((
            at("username"),
            "[fence_store] sets a username without a password, or a password without a username"
                .into(),
            "set username and one of password_file / password_env together".into(),
        )),
    };
    let identity = match (&raw.cert_file, &raw.key_file) {
        (Some(c), Some(k)) => Some((c.clone(), k.clone())),
        (None, None) => None,
        _ => {
            return Err((
                at("cert_file"),
                "[fence_store] sets only one of cert_file and key_file".into(),
                "set both (fencegate's client certificate and its key), or neither".into(),
            ))
        }
    };
    for (what, path) in [
        ("ca_file", raw.ca_file.as_ref()),
        ("cert_file", raw.cert_file.as_ref()),
        ("key_file", raw.key_file.as_ref()),
    ] {
        if let Some(path) = path {
            if let Err(e) = std::fs::metadata(path) {
                return Err((
                    at(what),
                    format!(
                        "[fence_store] {what} {} cannot be read: {e}",
                        path.display()
                    ),
                    "name PEM files that exist and that fencegate may read".into(),
                ));
            }
        }
    }
    let served = buckets
        .iter()
        .map(|(name, p)| (format!("bucket {name:?}"), p))
        .chain(bucket_defaults.map(|p| ("[bucket_defaults]".to_string(), p)));
    for (what, policy) in served {
        if policy.scope != ScopeKind::Object {
            return Err((bucket_at(&what, "scope"),
                format!("{what} fences a scope wider than one object, and the fence table is shared (kind = \"etcd\")"),
                "across instances commits are ordered per object (its row's intent on etcd, the store's deadline on its request): use scope = \"object\" (the default) with a shared table, or run one instance on rocksdb".into(),
            ));
        }
        // Refused until the hole found by tests/it/cluster/no_conditions.rs is closed: on such
        // a store two instances can both accept If-Match writes racing on one object
        // (docs/design.md, "Cluster mode on stores without conditions").
        match backends.get(&policy.backend) {
            Some(BackendConfig::S3(s3))
                if s3.conditional_writes() == super::ConditionalWrites::Fencegate
                    || s3.unsafe_unconditional_deletes =>
            {
                return Err((bucket_at(&what, "backend"),
                    format!("{what} uses backend {:?}, which sets conditional_writes = \"fencegate\" (or unsafe_no_conditional_writes) or unsafe_unconditional_deletes, and the fence table is shared (kind = \"etcd\")", policy.backend),
                    "cluster mode on a store that ignores conditional writes is not safe yet: two instances can both accept If-Match writes racing on one object (docs/design.md, \"Cluster mode on stores without conditions\"); use a store that honours If-Match and If-None-Match, or run one instance on rocksdb".into(),
                ));
            }
            Some(BackendConfig::S3(_)) | None => {}
            // Each commit and delete carries a SAS expiring at its intent's deadline, which
            // plays the presigned request's part; the start-up probe proves the service
            // refuses an expired one.
            Some(BackendConfig::Azure(_)) => {}
            // Each commit and delete goes by a V4 signed URL expiring at its intent's
            // deadline, as a presigned S3 request; the start-up probe proves it is refused late.
            Some(BackendConfig::Gcs(_)) => {}
            Some(BackendConfig::Fs { .. }) => {
                return Err((bucket_at(&what, "backend"),
                    format!("{what} uses backend {:?}, a local directory, and the fence table is shared (kind = \"etcd\")", policy.backend),
                    "several instances cannot order their commits on a local directory: put the bucket on an s3 backend, or run one instance on rocksdb".into(),
                ));
            }
        }
    }
    Ok(Some(EtcdConfig {
        endpoints: raw.endpoints.clone(),
        prefix: raw.prefix.clone(),
        user,
        ca_file: raw.ca_file.clone(),
        identity,
        timeout_ms: raw.timeout_ms,
        intent_ttl_secs: raw.intent_ttl_secs,
        store_apply_secs: raw.store_apply_secs,
        max_clock_skew_ms: raw.max_clock_skew_ms,
    }))
}

#[cfg(test)]
mod tests {
    use super::super::parse;

    const STORE: &str = "[backends.store]\nkind = \"s3\"\nendpoint = \"http://127.0.0.1:9\"\n\n";

    fn etcd(extra: &str, bucket: &str) -> String {
        format!("[fence_store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n{extra}\n{STORE}[buckets.bucket-one]\nbackend = \"store\"\n{bucket}\n")
    }

    fn refused(text: &str, needle: &str) {
        let e = parse(text, "t").unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }

    /// Review finding: a held commit landed after the object was given to a newer token. A
    /// user's SAS bounds it only by its own expiry, so it is refused; fencegate's commits carry
    /// a SAS of their own that expires with the deadline, which is why cluster mode is taken.
    #[test]
    fn azure_refuses_user_sas_tokens_and_takes_the_cluster_mode() {
        let azure = |extra: &str| {
            format!("[backends.az]\nkind = \"azure\"\naccount = \"a\"\n{extra}\n\n[buckets.bucket-one]\nbackend = \"az\"\n")
        };
        parse(&azure("access_key = \"a2V5\""), "t").unwrap();
        refused(&azure("sas_token = \"sv=1&sig=x\""), "does not take");
        refused(
            &azure("access_key = \"a2V5\"\ncommit_deadline_secs = 0"),
            "commit_deadline_secs to 0",
        );
        let cluster = format!(
            "[fence_store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n\n{}",
            azure("access_key = \"a2V5\"")
        );
        parse(&cluster, "t").unwrap();
    }

    /// A gcs commit goes by a signed URL that expires with its deadline (GCS allows 7 days at
    /// most), which is also why cluster mode is taken.
    #[test]
    fn gcs_bounds_the_commit_deadline_and_takes_the_cluster_mode() {
        let gcs = |extra: &str| {
            format!("[backends.g]\nkind = \"gcs\"\ncredentials_file = \"/k.json\"\n{extra}\n\n[buckets.bucket-one]\nbackend = \"g\"\n")
        };
        parse(&gcs(""), "t").unwrap();
        refused(&gcs("commit_deadline_secs = 0"), "outside 1..=604800");
        refused(&gcs("commit_deadline_secs = 604801"), "outside 1..=604800");
        refused(&gcs("block_size_bytes = 1024"), "block_size_bytes");
        refused(&gcs("sas_token = \"x\""), "sas_token");
        let cluster = format!(
            "[fence_store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n\n{}",
            gcs("")
        );
        parse(&cluster, "t").unwrap();
    }

    #[test]
    fn the_cluster_mode_needs_object_scopes_and_s3_backends() {
        let ok = etcd("", "");
        let config = parse(&ok, "t").unwrap();
        assert_eq!(config.etcd.unwrap().endpoints, ["http://127.0.0.1:2379"]);
        // The opt-in of the experimental cluster mode is still accepted, and changes nothing.
        parse(&etcd("unsafe_experimental_cluster = true", ""), "t").unwrap();
        refused(&etcd("", "scope = \"bucket\""), "wider than one object");
        refused(
            "[fence_store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\nunsafe_experimental_cluster = true\n",
            "a local directory",
        );
        refused(
            "[fence_store]\nendpoints = [\"http://127.0.0.1:2379\"]\n",
            "an etcd setting",
        );
        refused(&etcd("username = \"fg\"", ""), "without a password");
        // A store without conditions is refused, for now (docs/design.md, "Cluster mode on
        // stores without conditions").
        let nc = "[fence_store]\nkind = \"etcd\"\nendpoints = [\"http://127.0.0.1:2379\"]\n\n[backends.store]\nkind = \"s3\"\nendpoint = \"http://127.0.0.1:9\"\nconditional_writes = \"fencegate\"\nunsafe_unconditional_deletes = true\n\n[buckets.bucket-one]\nbackend = \"store\"\n";
        refused(nc, "not safe yet");
        refused(
            "[fence_store]\nkind = \"etcd\"\nendpoints = [\"127.0.0.1:2379\"]\nunsafe_experimental_cluster = true\n",
            "not an http:// or https:// URL",
        );
    }
}
