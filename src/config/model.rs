//! The configuration file's shape, as serde reads it. Every field has a default so that an
//! empty file (or no file) is a working configuration; `config/fencegate.toml` documents them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;
use toml::Spanned;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub fence_store: FenceStoreConfig,
    #[serde(default)]
    pub backends: BTreeMap<Spanned<String>, Spanned<BackendConfig>>,
    #[serde(default)]
    pub buckets: BTreeMap<Spanned<String>, Spanned<BucketPolicy>>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the native HTTP API.
    pub listen: String,
    /// Everything fencegate keeps on disk lives below this directory by default.
    pub data_dir: PathBuf,
    /// Largest accepted request body, in bytes.
    pub max_body_bytes: u64,
    /// A client that sends no body bytes for this long is cut off (slowloris guard).
    pub body_idle_timeout_secs: u64,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./data"),
            max_body_bytes: 5 * 1024 * 1024 * 1024,
            body_idle_timeout_secs: 30,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FenceStoreConfig {
    /// Only `rocksdb` for now.
    pub kind: FenceStoreKind,
    /// Defaults to `<data_dir>/fences`.
    pub path: Option<PathBuf>,
}

impl Default for FenceStoreConfig {
    fn default() -> Self {
        FenceStoreConfig {
            kind: FenceStoreKind::Rocksdb,
            path: None,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FenceStoreKind {
    Rocksdb,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BackendConfig {
    /// A local directory. `root` defaults to `<data_dir>/objects`.
    Fs {
        #[serde(default)]
        root: Option<PathBuf>,
    },
}

/// Whether a bucket demands tokens.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum FencingMode {
    /// Every write and delete must carry a token.
    #[default]
    Required,
    /// A token, when sent, is checked; writes without one pass unfenced.
    Optional,
    /// Tokens are ignored: fencegate is a plain proxy (bypass detection still applies).
    Off,
}

/// Which resource a token fences.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ScopeKind {
    /// One scope per object (bucket + key).
    #[default]
    Object,
    /// The first `prefix_segments` `/`-separated segments of the key.
    Prefix,
    /// The whole bucket is one scope.
    Bucket,
    /// The client names its lock in the `Fencing-Scope` header.
    Header,
}

/// Whether a token equal to the recorded highest is accepted.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum TokenOrder {
    /// Equal tokens pass: one holder may write many times (contract line 4).
    #[default]
    NonDecreasing,
    /// Every accepted write needs a token above the recorded highest.
    StrictlyIncreasing,
}

/// What a write does when the backend object changed behind fencegate's back.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum BypassPolicy {
    /// Refuse the write (409 BypassDetected); log and count it.
    #[default]
    Reject,
    /// Log and count it, take the foreign version as current, and commit over it.
    Adopt,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct BucketPolicy {
    /// Name of an entry in `[backends]`.
    pub backend: String,
    pub fencing: FencingMode,
    pub scope: ScopeKind,
    /// With `scope = "prefix"`: how many leading key segments name the scope.
    pub prefix_segments: u32,
    pub tokens: TokenOrder,
    /// Deletes need a token (and leave a tombstone) like writes do.
    pub fenced_deletes: bool,
    pub on_bypass: BypassPolicy,
}

impl Default for BucketPolicy {
    fn default() -> Self {
        BucketPolicy {
            backend: "local".into(),
            fencing: FencingMode::Required,
            scope: ScopeKind::Object,
            prefix_segments: 1,
            tokens: TokenOrder::NonDecreasing,
            fenced_deletes: true,
            on_bypass: BypassPolicy::Reject,
        }
    }
}
