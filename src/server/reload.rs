//! Reloading the configuration while serving (SIGHUP, `POST /admin/reload`). The sources the
//! process started with (the file or the embedded default, the `FENCEGATE_*__*` variables,
//! the command line's overrides) are read again, and these are swapped: the key table, the
//! configured buckets' policies, the admin bearer token (a rotated file) and the TLS
//! certificate. All of them, or none.
//!
//! Everything is read and checked before anything is swapped; the swaps that follow cannot
//! fail. A configuration that does not validate, a certificate that does not load, a change
//! of a bucket's scope kind (its fence rows are keyed by it: the recorded tokens and
//! tombstones would be forgotten), and a change of anything else, which this process took at
//! start-up (listeners, data_dir, the fence store, backends, the set of buckets, a bucket's
//! backend or store prefix, `[bucket_defaults]`, `[admin] listen`, a bearer token set or
//! removed, limits, development mode on or off), refuse the whole reload: the configuration in use stays as it was, whole, and the
//! answer says why. A file is then never half applied, so what runs is always one file's
//! configuration.

use super::tls::{Tls, TlsError};
use crate::auth::admin::AdminAuth;
use crate::auth::{KeySet, KeyTable};
use crate::config::{BucketPolicy, Config, ConfigError};
use crate::gate::Gate;
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error("the configuration is invalid, so nothing was changed: {0}")]
    Invalid(ConfigError),
    #[error("these settings changed and take effect only at start-up: {}; nothing was changed. Restart fencegate to apply them, or set them back to reload the rest", .0.join(", "))]
    NeedsRestart(Vec<String>),
    #[error("bucket {bucket}: its scope would change from {from} to {to}; the tokens and tombstones recorded under {from} would be forgotten and a stale writer accepted, so nothing was changed. Set scope (and prefix_segments) back, or stop the bucket's writers and restart once with --accept-scope-change {bucket}")]
    ScopeChange {
        bucket: String,
        from: String,
        to: String,
    },
    #[error("the TLS certificate cannot be loaded, so nothing was changed: {0}")]
    Tls(#[from] TlsError),
    #[error("the reload failed, nothing was changed: {0}")]
    Internal(String),
}

impl ReloadError {
    pub fn status(&self) -> u16 {
        match self {
            ReloadError::Invalid(_) | ReloadError::Tls(_) => 422,
            ReloadError::NeedsRestart(_) | ReloadError::ScopeChange { .. } => 409,
            ReloadError::Internal(_) => 500,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ReloadError::Invalid(_) => "InvalidConfiguration",
            ReloadError::NeedsRestart(_) => "RestartRequired",
            ReloadError::ScopeChange { .. } => "ScopeChangeRefused",
            ReloadError::Tls(_) => "TlsReloadFailed",
            ReloadError::Internal(_) => "ReloadFailed",
        }
    }
}

/// The keys a reload changed, by name (never a secret).
#[derive(Debug, Default, Serialize)]
pub struct KeyChanges {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Same name, another access key id, secret or permissions.
    pub changed: Vec<String>,
}

/// What a reload changed.
#[derive(Debug, Serialize)]
pub struct ReloadReport {
    pub reloaded: bool,
    pub keys: KeyChanges,
    /// Whether the admin bearer token changed (its file was rewritten).
    pub admin_token: bool,
    /// Each bucket whose policy changed, with the fields that did.
    pub buckets: BTreeMap<String, Vec<String>>,
    /// `"reloaded"`, or `"off"` without `[server.tls]`.
    pub tls: &'static str,
}

impl ReloadReport {
    /// Whether the keys and the policies stayed as they were.
    pub fn unchanged(&self) -> bool {
        self.keys.added.is_empty()
            && self.keys.removed.is_empty()
            && self.keys.changed.is_empty()
            && self.buckets.is_empty()
            && !self.admin_token
    }
}

/// What a reload swaps, and the configuration in use.
pub struct Reloader {
    /// Also serializes reloads: two at once would each check against the same old
    /// configuration.
    current: tokio::sync::Mutex<Config>,
    keys: Arc<KeyTable>,
    admin: Arc<AdminAuth>,
    gate: Arc<Gate>,
    tls: Option<Tls>,
}

impl Reloader {
    pub fn new(
        config: Config,
        keys: Arc<KeyTable>,
        admin: Arc<AdminAuth>,
        gate: Arc<Gate>,
        tls: Option<Tls>,
    ) -> Reloader {
        Reloader {
            current: tokio::sync::Mutex::new(config),
            keys,
            admin,
            gate,
            tls,
        }
    }

    /// Reads the sources again and applies the keys, policies and certificate they give, or
    /// nothing. `principal` is who asked, for the audit line ("SIGHUP" for the signal).
    pub async fn reload(&self, principal: &str) -> Result<ReloadReport, ReloadError> {
        let result = self.try_reload().await;
        crate::metrics::reloaded(result.is_ok());
        match &result {
            Ok(report) => tracing::info!(
                target: "fencegate::audit",
                principal = %principal,
                keys_added = ?report.keys.added,
                keys_removed = ?report.keys.removed,
                keys_changed = ?report.keys.changed,
                buckets_changed = ?report.buckets.keys().collect::<Vec<_>>(),
                admin_token_rotated = report.admin_token,
                tls = report.tls,
                "configuration reloaded"
            ),
            Err(e) => tracing::warn!(
                target: "fencegate::audit",
                principal = %principal,
                code = e.code(),
                error = %e,
                "configuration reload refused; the configuration in use stays"
            ),
        }
        result
    }

    async fn try_reload(&self) -> Result<ReloadReport, ReloadError> {
        let mut current = self.current.lock().await;
        // Reading the file, secret files and resolving store endpoints block.
        let old = current.clone();
        let new = tokio::task::spawn_blocking(move || old.reread())
            .await
            .map_err(|e| ReloadError::Internal(e.to_string()))?
            .map_err(ReloadError::Invalid)?;
        let restart = needs_restart(&current, &new);
        if !restart.is_empty() {
            return Err(ReloadError::NeedsRestart(restart));
        }
        for (bucket, policy) in &new.buckets {
            let Some(was) = current.buckets.get(bucket) else {
                continue;
            };
            let (from, to) = (Config::scope_kind(was), Config::scope_kind(policy));
            if from != to {
                return Err(ReloadError::ScopeChange {
                    bucket: bucket.clone(),
                    from,
                    to,
                });
            }
        }
        let prepared = match &self.tls {
            None => None,
            Some(tls) => {
                let tls = tls.clone();
                Some(
                    tokio::task::spawn_blocking(move || tls.prepare())
                        .await
                        .map_err(|e| ReloadError::Internal(e.to_string()))??,
                )
            }
        };
        let keys = key_changes(&current, &new);
        let mut buckets = BTreeMap::new();
        let mut policies = BTreeMap::new();
        for (name, policy) in &new.buckets {
            let Some(was) = current.buckets.get(name) else {
                continue;
            };
            let fields = changed_fields(was, policy);
            if !fields.is_empty() {
                buckets.insert(name.clone(), fields);
                policies.insert(name.clone(), policy.clone());
            }
        }
        // What the swaps below refuse, checked against what is live before any of them runs
        // (`needs_restart` compared the configurations already), so that none fails halfway.
        if self.keys.dev_mode() != new.keys.is_empty()
            || self.admin.has_token() != new.admin_token.is_some()
        {
            return Err(ReloadError::NeedsRestart(vec![
                "development mode or the admin bearer token set or removed".into(),
            ]));
        }
        let admin_token = current.admin_token != new.admin_token;
        let swapped = self
            .keys
            .replace(KeySet::new(new.keys.values().cloned()))
            .and_then(|()| match admin_token {
                true => self.admin.replace_token(new.admin_token.clone()),
                false => Ok(()),
            });
        if let Err(e) = swapped {
            // Not reached: both conditions were checked above.
            return Err(ReloadError::Internal(e.to_string()));
        }
        let missing = self.gate.replace_policies(&policies);
        if !missing.is_empty() {
            // Configured buckets are served from start-up on; this is not expected.
            tracing::warn!(buckets = ?missing, "a reloaded policy names a bucket the gate does not serve");
        }
        let tls = match (&self.tls, prepared) {
            (Some(tls), Some(prepared)) => {
                tls.install(prepared);
                "reloaded"
            }
            _ => "off",
        };
        *current = new;
        Ok(ReloadReport {
            reloaded: true,
            keys,
            admin_token,
            buckets,
            tls,
        })
    }
}

fn key_changes(old: &Config, new: &Config) -> KeyChanges {
    let mut changes = KeyChanges::default();
    for (name, key) in &new.keys {
        match old.keys.get(name) {
            None => changes.added.push(name.clone()),
            Some(was) if was != key => changes.changed.push(name.clone()),
            Some(_) => {}
        }
    }
    changes.removed = old
        .keys
        .keys()
        .filter(|n| !new.keys.contains_key(*n))
        .cloned()
        .collect();
    changes
}

/// A policy's fields that differ.
fn changed_fields(old: &BucketPolicy, new: &BucketPolicy) -> Vec<String> {
    let mut out = Vec::new();
    diff("", &json(old), &json(new), &mut out);
    out
}

/// Fields of a bucket's policy that pick where its objects live: the backend was built and
/// probed for them at start-up, and their namespaces checked against the other buckets'.
const PLACE_FIELDS: [&str; 3] = ["backend", "backend_bucket", "backend_prefix"];

/// Everything the process took at start-up that differs, as dotted field names (never values:
/// some are secrets).
fn needs_restart(old: &Config, new: &Config) -> Vec<String> {
    let mut out = Vec::new();
    diff("server", &json(&old.server), &json(&new.server), &mut out);
    diff(
        "fence_store",
        &json(&old.fence_store),
        &json(&new.fence_store),
        &mut out,
    );
    diff(
        "backends",
        &json(&old.backends),
        &json(&new.backends),
        &mut out,
    );
    // The deprecated [s3.keys] are keys, and reload with the others.
    let gateway = |c: &Config| {
        let mut s3 = c.s3.clone();
        s3.keys.clear();
        json(&s3)
    };
    diff("s3", &gateway(old), &gateway(new), &mut out);
    diff("leases", &json(&old.leases), &json(&new.leases), &mut out);
    diff(
        "bucket_defaults",
        &json(&old.bucket_defaults),
        &json(&new.bucket_defaults),
        &mut out,
    );
    if old.admin_listen != new.admin_listen {
        out.push("admin.listen".into());
    }
    if old.admin_token.is_some() != new.admin_token.is_some() {
        out.push("admin bearer token set or removed".into());
    }
    if old.keys.is_empty() != new.keys.is_empty() {
        out.push("development mode (no [keys]) on or off".into());
    }
    for name in old.buckets.keys().filter(|b| !new.buckets.contains_key(*b)) {
        out.push(format!("buckets.{name} (removed)"));
    }
    for (name, policy) in &new.buckets {
        let Some(was) = old.buckets.get(name) else {
            out.push(format!("buckets.{name} (added)"));
            continue;
        };
        for field in changed_fields(was, policy) {
            if PLACE_FIELDS.contains(&field.as_str()) {
                out.push(format!("buckets.{name}.{field}"));
            }
        }
    }
    out
}

fn json<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).unwrap_or(Value::Null)
}

/// The dotted paths below `prefix` where `a` and `b` differ.
fn diff(prefix: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    let join = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                diff(
                    &join(k),
                    a.get(k).unwrap_or(&Value::Null),
                    b.get(k).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (a, b) if a != b => out.push(prefix.to_string()),
        _ => {}
    }
}

#[async_trait::async_trait]
impl crate::api::Reload for Reloader {
    async fn reload(&self, principal: &str) -> Result<String, crate::api::ReloadRefused> {
        match Reloader::reload(self, principal).await {
            Ok(report) => Ok(serde_json::to_string(&report).unwrap_or_default()),
            Err(e) => Err(crate::api::ReloadRefused {
                status: e.status(),
                code: e.code(),
                message: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn config(text: &str) -> Config {
        parse(text, "t").unwrap()
    }

    const KEYS: &str = "[keys.a]\naccess_key_id = \"A\"\nsecret_access_key = \"s-0123456789abcdef\"\nbuckets = { \"*\" = [\"read\"] }\n";

    #[test]
    fn only_keys_policies_and_certificates_reload() {
        let old = config(&format!("{KEYS}[buckets.logs]\n"));
        let same = config(&format!("{KEYS}[buckets.logs]\n"));
        assert!(needs_restart(&old, &same).is_empty());
        let policy = config(&format!(
            "{KEYS}[keys.b]\naccess_key_id = \"B\"\nsecret_access_key = \"t-0123456789abcdef\"\n[buckets.logs]\nfencing = \"off\"\ntokens = \"strictly-increasing\"\n"
        ));
        assert!(needs_restart(&old, &policy).is_empty());
        assert_eq!(
            changed_fields(&old.buckets["logs"], &policy.buckets["logs"]),
            ["fencing", "tokens"]
        );
        assert_eq!(key_changes(&old, &policy).added, ["b"]);
        let moved = config(&format!(
            "{KEYS}[server]\nlisten = \"127.0.0.1:9\"\nmax_body_bytes = \"1MiB\"\n[buckets.logs]\n[buckets.more]\n"
        ));
        assert_eq!(
            needs_restart(&old, &moved),
            [
                "server.listen",
                "server.max_body_bytes",
                "buckets.more (added)"
            ]
        );
        let dev = config("[buckets.logs]\n");
        assert_eq!(
            needs_restart(&old, &dev),
            ["development mode (no [keys]) on or off"]
        );
    }
}
