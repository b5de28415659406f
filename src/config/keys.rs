//! The one key table (`[keys.NAME]`): who may call fencegate, on every surface, and what each
//! key may do per bucket pattern. Secrets come from the file, an environment variable or a
//! secret file, are resolved here once, and never reach a log line. The old `[s3.keys.NAME]`
//! still loads, with a deprecation warning, as read + write + delete on its buckets.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

impl Permission {
    /// As the configuration spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::Delete => "delete",
            Permission::Fence => "fence",
            Permission::Lease => "lease",
        }
    }
}

/// What a key may do on the buckets a pattern matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// GET, HEAD, list, fence and lease information.
    Read,
    /// PUT, CopyObject (destination), multipart uploads, CreateBucket.
    Write,
    /// DELETE, DeleteObjects, AbortMultipartUpload, DeleteBucket.
    Delete,
    /// Advance a fence without writing (`POST /v1/fences`).
    Fence,
    /// Bind a lease to this bucket's fences, and mint S3 credentials for it.
    Lease,
}

/// `[keys.NAME]` as written in the file.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKey {
    pub access_key_id: String,
    /// The secret inline. Prefer one of the two below outside a test setup.
    pub secret_access_key: Option<String>,
    /// A file holding the secret (a Docker or Kubernetes secret); surrounding whitespace is
    /// ignored.
    pub secret_access_key_file: Option<PathBuf>,
    /// An environment variable holding the secret.
    pub secret_access_key_env: Option<String>,
    /// Bucket pattern (`*` matches any run of characters) to the permissions on it.
    #[serde(default)]
    pub buckets: BTreeMap<String, Vec<Permission>>,
    /// Lease names (patterns) this key may acquire, renew, release and show.
    #[serde(default)]
    pub lease_names: Vec<String>,
    /// Everything, everywhere: fence resets, every bucket and lease.
    #[serde(default, deserialize_with = "super::units::boolean")]
    pub admin: bool,
}

/// A key with its secret resolved.
#[derive(Clone, PartialEq, Eq)]
pub struct Key {
    pub name: String,
    pub access_key_id: String,
    pub secret_access_key: String,
    pub buckets: BTreeMap<String, Vec<Permission>>,
    pub lease_names: Vec<String>,
    pub admin: bool,
}

impl Key {
    /// May this key do `perm` on `bucket`?
    pub fn allows(&self, perm: Permission, bucket: &str) -> bool {
        self.admin
            || self
                .buckets
                .iter()
                .any(|(pattern, perms)| perms.contains(&perm) && glob_match(pattern, bucket))
    }

    /// May this key hold (acquire, renew, release, show) the lease `name`?
    pub fn may_lease(&self, name: &str) -> bool {
        self.admin || self.lease_names.iter().any(|p| glob_match(p, name))
    }

    /// Does it reach `bucket` at all (for ListBuckets)?
    pub fn sees_bucket(&self, bucket: &str) -> bool {
        self.admin || self.buckets.keys().any(|p| glob_match(p, bucket))
    }
}

impl std::fmt::Debug for RawKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawKey")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key_file", &self.secret_access_key_file)
            .field("secret_access_key_env", &self.secret_access_key_env)
            .finish_non_exhaustive()
    }
}

// Hand-written so that a secret can never reach a log line through `{:?}`.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("name", &self.name)
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("buckets", &self.buckets)
            .field("lease_names", &self.lease_names)
            .field("admin", &self.admin)
            .finish()
    }
}

/// `*` matches any run of characters (including none); everything else matches itself.
/// Small enough that a glob crate would add more than it saves.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let Some((head, rest)) = pattern.split_once('*') else {
        return pattern == text;
    };
    let Some(mut text) = text.strip_prefix(head) else {
        return false;
    };
    let mut parts: Vec<&str> = rest.split('*').collect();
    let last = parts.pop().unwrap_or("");
    for part in parts {
        match text.find(part) {
            Some(i) => text = &text[i + part.len()..],
            None => return false,
        }
    }
    text.len() >= last.len() && text.ends_with(last)
}

/// Resolves one key's secret and checks its shape; the error is the problem, for the caller
/// to place in its message.
pub fn resolve(
    name: &str,
    raw: &RawKey,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Key, String> {
    let sources = [
        raw.secret_access_key.is_some(),
        raw.secret_access_key_file.is_some(),
        raw.secret_access_key_env.is_some(),
    ];
    let secret = match (
        &raw.secret_access_key,
        &raw.secret_access_key_file,
        &raw.secret_access_key_env,
    ) {
        _ if sources.iter().filter(|s| **s).count() != 1 => {
            return Err("needs exactly one of secret_access_key, secret_access_key_file and secret_access_key_env".into())
        }
        (Some(s), _, _) => s.clone(),
        (_, Some(path), _) => std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read secret_access_key_file {}: {e}", path.display()))?
            .trim()
            .to_string(),
        (_, _, Some(var)) => env(var)
            .ok_or_else(|| format!("names secret_access_key_env {}, which is not set in the environment fencegate was started with (a reload sees that environment, not variables set since: for a key added by a reload, use secret_access_key_file)", super::layers::shown_var(var)))?
            .trim()
            .to_string(),
        _ => unreachable!("exactly one source is set"),
    };
    if raw.access_key_id.is_empty() || secret.is_empty() {
        return Err("has an empty access_key_id or secret".into());
    }
    if raw.access_key_id.len() > 128
        || !raw
            .access_key_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(
            "has an access_key_id that is not 1-128 letters, digits, '-', '_' or '.'".into(),
        );
    }
    if secret.chars().count() < super::MIN_SECRET_LEN {
        return Err(format!(
            "has a secret shorter than {} characters, short enough to guess; generate one with `openssl rand -hex 20`",
            super::MIN_SECRET_LEN
        ));
    }
    if raw.lease_names.is_empty()
        && raw
            .buckets
            .values()
            .flatten()
            .any(|p| *p == Permission::Lease)
        && !raw.admin
    {
        return Err("grants \"lease\" on a bucket but no lease_names it may acquire".into());
    }
    Ok(Key {
        name: name.to_string(),
        access_key_id: raw.access_key_id.clone(),
        secret_access_key: secret,
        buckets: raw.buckets.clone(),
        lease_names: raw.lease_names.clone(),
        admin: raw.admin,
    })
}

/// A key-table problem: the key path it is at, the problem and its fix.
pub type KeyProblem = (Vec<String>, String, String);

/// The key table from `[keys]` and the deprecated `[s3.keys]`, each secret resolved; or the
/// problem, where it is and its fix.
type KeyTableResult = Result<(BTreeMap<String, Key>, Vec<String>), KeyProblem>;

/// The field of `[keys.NAME]` a problem from [`resolve`] is about, for its position.
fn field_of(raw: &RawKey, problem: &str) -> Option<&'static str> {
    if problem.contains("a secret shorter") {
        Some(if raw.secret_access_key_file.is_some() {
            "secret_access_key_file"
        } else if raw.secret_access_key_env.is_some() {
            "secret_access_key_env"
        } else {
            "secret_access_key"
        })
    } else if problem.contains("secret_access_key_env") && raw.secret_access_key_env.is_some() {
        // Before the file: this problem's advice names secret_access_key_file.
        Some("secret_access_key_env")
    } else if problem.contains("secret_access_key_file") {
        Some("secret_access_key_file")
    } else if problem.contains("access_key_id") && !problem.contains("secret") {
        Some("access_key_id")
    } else if problem.contains("lease_names") {
        Some("buckets")
    } else {
        None
    }
}

pub fn table(
    raw: &BTreeMap<String, RawKey>,
    s3: &super::S3GatewayConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> KeyTableResult {
    let mut out = BTreeMap::new();
    let mut warnings = Vec::new();
    let fix = "give each key a unique access_key_id, one secret source, and permissions such as buckets = { \"*\" = [\"read\", \"write\"] } (config/fencegate.toml documents [keys])";
    let path = |section: &[&str], name: &str, field: Option<&str>| -> Vec<String> {
        section
            .iter()
            .copied()
            .chain([name])
            .chain(field)
            .map(str::to_string)
            .collect()
    };
    for (name, k) in raw {
        let key = resolve(name, k, env).map_err(|p| {
            let fix = if p.starts_with("cannot read secret_access_key_file") {
                "give a path fencegate's user can read; a relative one is read from the directory fencegate was started in, not the configuration file's, so prefer an absolute path".to_string()
            } else {
                fix.to_string()
            };
            (
                path(&["keys"], name, field_of(k, &p)),
                format!("[keys.{name}] {p}"),
                fix,
            )
        })?;
        out.insert(name.clone(), key);
    }
    for (name, k) in &s3.keys {
        if out.contains_key(name) {
            return Err((
                path(&["s3", "keys"], name, None),
                format!("[s3.keys.{name}] and [keys.{name}] both exist"),
                "move the key to [keys.NAME] only".into(),
            ));
        }
        if k.buckets.is_empty() {
            return Err((
                path(&["s3", "keys"], name, Some("buckets")),
                format!("[s3.keys.{name}] lists no buckets"),
                fix.into(),
            ));
        }
        let mut perms = vec![Permission::Read];
        if k.write {
            perms.extend([Permission::Write, Permission::Delete]);
        }
        let raw = RawKey {
            access_key_id: k.access_key_id.clone(),
            secret_access_key: Some(k.secret_access_key.clone()),
            secret_access_key_file: None,
            secret_access_key_env: None,
            buckets: k
                .buckets
                .iter()
                .map(|b| (b.clone(), perms.clone()))
                .collect(),
            lease_names: vec![],
            admin: false,
        };
        let key = resolve(name, &raw, env).map_err(|p| {
            (
                path(&["s3", "keys"], name, field_of(&raw, &p)),
                format!("[s3.keys.{name}] {p}"),
                fix.to_string(),
            )
        })?;
        warnings.push(format!(
            "[s3.keys.{name}] is deprecated: move it to [keys.{name}] with buckets = {{ \"{}\" = {:?} }}; it now serves every surface, not only S3",
            k.buckets.join(","),
            perms
        ));
        out.insert(name.clone(), key);
    }
    let mut ids = std::collections::BTreeSet::new();
    for key in out.values() {
        if !ids.insert(key.access_key_id.as_str()) {
            let section: &[&str] = if raw.contains_key(&key.name) {
                &["keys"]
            } else {
                &["s3", "keys"]
            };
            return Err((
                path(section, &key.name, Some("access_key_id")),
                format!(
                    "[keys.{}] reuses the access_key_id {:?} of another key",
                    key.name, key.access_key_id
                ),
                fix.into(),
            ));
        }
    }
    Ok((out, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        for (p, t, m) in [
            ("*", "", true),
            ("*", "abc", true),
            ("abc", "abc", true),
            ("abc", "abcd", false),
            ("logs-*", "logs-2026", true),
            ("logs-*", "log", false),
            ("*-prod", "db-prod", true),
            ("*-prod", "db-prod-x", false),
            ("a*b*c", "aXXbYYc", true),
            ("a*b*c", "acb", false),
            ("a*a", "a", false),
            ("jobs/*", "jobs/nightly", true),
        ] {
            assert_eq!(glob_match(p, t), m, "{p} ~ {t}");
        }
    }

    fn raw(secret: Option<&str>, file: Option<PathBuf>, env: Option<&str>) -> RawKey {
        RawKey {
            access_key_id: "AK".into(),
            secret_access_key: secret.map(str::to_string),
            secret_access_key_file: file,
            secret_access_key_env: env.map(str::to_string),
            buckets: BTreeMap::from([("b*".to_string(), vec![Permission::Read])]),
            lease_names: vec![],
            admin: false,
        }
    }

    #[test]
    fn secrets_come_from_exactly_one_place() {
        let no_env = |_: &str| None;
        assert_eq!(
            resolve("k", &raw(Some("s-0123456789abcdef"), None, None), &no_env)
                .unwrap()
                .secret_access_key,
            "s-0123456789abcdef"
        );
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("secret");
        std::fs::write(&file, "from-file-0123456789\n").unwrap();
        assert_eq!(
            resolve("k", &raw(None, Some(file.clone()), None), &no_env)
                .unwrap()
                .secret_access_key,
            "from-file-0123456789"
        );
        let env = |v: &str| (v == "FG_S").then(|| "from-env-0123456789".to_string());
        assert_eq!(
            resolve("k", &raw(None, None, Some("FG_S")), &env)
                .unwrap()
                .secret_access_key,
            "from-env-0123456789"
        );
        assert!(resolve("k", &raw(None, None, None), &no_env).is_err());
        assert!(resolve(
            "k",
            &raw(Some("s-0123456789abcdef"), Some(file), None),
            &no_env
        )
        .is_err());
        assert!(resolve("k", &raw(None, None, Some("UNSET")), &no_env)
            .unwrap_err()
            .contains("not set"));
        let key = resolve("k", &raw(Some("s-0123456789abcdef"), None, None), &no_env).unwrap();
        assert!(!format!("{key:?}").contains("s-0123456789abcdef"));
        assert!(key.allows(Permission::Read, "bx"));
        assert!(!key.allows(Permission::Write, "bx"));
        assert!(!key.allows(Permission::Read, "a"));
        // A secret short enough to guess is refused, wherever it comes from.
        let short = resolve("k", &raw(Some("fifteen-chars-x"), None, None), &no_env);
        assert!(short.unwrap_err().contains("shorter than 16"));
        let env = |_: &str| Some("short".to_string());
        assert!(resolve("k", &raw(None, None, Some("FG_S")), &env).is_err());
    }
}
