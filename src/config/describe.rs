//! The start-up summary of a configuration: what fencegate will serve, logged line by line.

use super::*;

/// A setting as the configuration file spells it (`required`, `strictly-increasing`), not as
/// Rust names it.
fn spelled<T: serde::Serialize>(value: &T) -> String {
    match toml::Value::try_from(value) {
        Ok(toml::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => "?".into(),
    }
}

impl Config {
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
                BackendConfig::Azure(az) => {
                    let credentials = match (&az.access_key, &az.sas_token) {
                        (Some(_), _) => "a shared key",
                        (None, Some(_)) => "a SAS token",
                        (None, None) => "the environment (AZURE_STORAGE_*)",
                    };
                    out += &format!(
                        "backend {name}: azure at {} (account {}, credentials from {credentials})\n",
                        az.endpoint.as_deref().unwrap_or("the account's blob.core.windows.net"),
                        az.account.as_deref().unwrap_or("from the environment"),
                    )
                }
                BackendConfig::Gcs(g) => {
                    out += &format!(
                        "backend {name}: gcs at {} (service account key {})\n",
                        g.endpoint
                            .as_deref()
                            .unwrap_or("https://storage.googleapis.com"),
                        g.credentials_file.as_ref().map_or_else(
                            || "from GOOGLE_APPLICATION_CREDENTIALS".to_string(),
                            |p| p.display().to_string()
                        ),
                    )
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
                                s3.conditional_writes() == crate::config::ConditionalWrites::Fencegate,
                                ", conditional_writes = \"fencegate\": conditions decided by fencegate alone, writes made around it not always detected"
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
                other => spelled(&other),
            };
            out += &format!(
                "bucket {name}: backend={} fencing={} scope={scope} tokens={} fenced_deletes={} on_bypass={} max_token_jump={}\n",
                p.backend,
                spelled(&p.fencing),
                spelled(&p.tokens),
                p.fenced_deletes,
                spelled(&p.on_bypass),
                p.max_token_jump
                    .map_or_else(|| "any".to_string(), |j| j.to_string())
            );
            if !p.cors.is_empty() {
                let origins: Vec<&str> = p
                    .cors
                    .iter()
                    .flat_map(|r| r.allowed_origins.iter().map(String::as_str))
                    .collect();
                out += &format!(
                    "bucket {name}: cors: {} rule(s) for origins {}\n",
                    p.cors.len(),
                    origins.join(", ")
                );
            }
        }
        match &self.bucket_defaults {
            Some(p) => {
                out += &format!(
                    "buckets created through S3: backend={} fencing={} (from [bucket_defaults])\n",
                    p.backend,
                    spelled(&p.fencing)
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
                    "none: development mode (anonymous access and the development key fencegate, whose secret is in the README; loopback only)".to_string()
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
