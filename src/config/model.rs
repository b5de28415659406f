//! The configuration file's shape, as serde reads it. Every field has a default so that an
//! empty file (or no file) is a working configuration; `config/fencegate.toml` documents them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

pub use super::azure_backend::AzureBackendConfig;
pub use super::gcs_backend::GcsBackendConfig;

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: ServerConfig,
    #[serde(default)]
    pub fence_store: FenceStoreConfig,
    #[serde(default)]
    pub backends: BTreeMap<String, BackendConfig>,
    #[serde(default)]
    pub buckets: BTreeMap<String, BucketPolicy>,
    #[serde(default)]
    pub s3: S3GatewayConfig,
    /// The policy of buckets created through the S3 API (CreateBucket). Without it, buckets
    /// come only from the configuration.
    #[serde(default)]
    pub bucket_defaults: Option<BucketPolicy>,
    #[serde(default)]
    pub leases: LeaseConfig,
    /// The key table of every surface (`[keys.NAME]`).
    #[serde(default)]
    pub keys: BTreeMap<String, super::keys::RawKey>,
    #[serde(default)]
    pub admin: AdminConfig,
}

/// The admin surface (`[admin]`): `/metrics` and `/admin/...`.
#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// A listener of its own for the admin surface; unset, it shares the native listener.
    pub listen: Option<String>,
    /// A bearer token that also opens the admin surface (Prometheus scrapes with it), read from
    /// this file...
    pub bearer_token_file: Option<PathBuf>,
    /// ... or from this environment variable. Never from the command line.
    pub bearer_token_env: Option<String>,
}

/// `[server.tls]`: PEM files, reloaded on SIGHUP.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    /// The certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// fencegate's own lease service (`[leases]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaseConfig {
    /// How long lease-bound S3 credentials keep working after their lease ends (released,
    /// expired or replaced), so a write already in flight is judged by the fence.
    #[serde(deserialize_with = "super::units::secs")]
    pub credential_grace_secs: u64,
    /// Live leases one access key may hold at once (429 `TooManyLeases` past it); on a shared
    /// fence table, over every instance together.
    #[serde(deserialize_with = "super::units::int")]
    pub max_live_per_key: usize,
}

impl Default for LeaseConfig {
    fn default() -> Self {
        LeaseConfig {
            credential_grace_secs: 30,
            max_live_per_key: 1_000,
        }
    }
}

/// The most one body read before its signature is checked may take (`auth::unverified`): lease
/// and fence requests are small JSON; object PUTs this large sign `x-amz-content-sha256` and
/// stream.
pub const MAX_UNVERIFIED_BODY: usize = 1024 * 1024;
/// `[server] max_unverified_body_bytes` unless configured: 64 bodies of the largest size.
pub const DEFAULT_UNVERIFIED_BODY_BYTES: usize = 64 * MAX_UNVERIFIED_BODY;
/// `[server] upload_expiry_secs` unless configured: a day, as MinIO's stale-upload expiry.
pub const DEFAULT_UPLOAD_EXPIRY_SECS: u64 = 86_400;
/// `[server] max_uploads_per_key` unless configured.
pub const DEFAULT_MAX_UPLOADS_PER_KEY: usize = 1_000;
/// `[server] max_uploads_per_bucket` unless configured.
pub const DEFAULT_MAX_UPLOADS_PER_BUCKET: usize = 10_000;
/// `[server] max_tombstones_per_bucket` unless configured.
pub const DEFAULT_MAX_TOMBSTONES_PER_BUCKET: u64 = 100_000;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Address of the native HTTP API.
    pub listen: String,
    /// Everything fencegate keeps on disk lives below this directory by default.
    pub data_dir: PathBuf,
    /// Largest accepted request body, in bytes.
    #[serde(deserialize_with = "super::units::bytes")]
    pub max_body_bytes: u64,
    /// A client that sends no body bytes for this long is cut off (slowloris guard).
    #[serde(deserialize_with = "super::units::secs")]
    pub body_idle_timeout_secs: u64,
    /// Largest accepted request head (all header names and values), in bytes: 431 above it.
    #[serde(deserialize_with = "super::units::bytes_usize")]
    pub max_header_bytes: usize,
    /// Bytes of request bodies held at once, over every connection, before their signature can
    /// be checked (native API bodies signed over their own hash, at most 1 MiB each). Past it,
    /// such a body is refused with 503 `SlowDown`.
    #[serde(deserialize_with = "super::units::bytes_usize")]
    pub max_unverified_body_bytes: usize,
    /// Without keys fencegate runs in development mode (anonymous access), and then refuses
    /// to listen on anything but loopback. `false` lifts that refusal: anyone who reaches the
    /// port may then do anything. Logged loudly at every start.
    #[serde(deserialize_with = "super::units::boolean")]
    pub protected_mode: bool,
    /// TLS on every listener (native, S3, admin). Unset: plain HTTP.
    pub tls: Option<TlsFiles>,
    /// On SIGTERM or SIGINT, how long requests in flight may still take before the process
    /// exits anyway (a commit cut short is a crash, which the commit protocol survives).
    #[serde(deserialize_with = "super::units::secs")]
    pub shutdown_grace_secs: u64,
    /// Most connections open at once, over every listener; more wait in the kernel's backlog.
    /// Lowered at start-up to fit the open-file limit.
    #[serde(deserialize_with = "super::units::int")]
    pub max_connections: usize,
    /// How long the answer of a request sent with an `Idempotency-Key` is kept: a retry within
    /// this time is answered as the first request was, after it the key may be used afresh.
    #[serde(deserialize_with = "super::units::secs")]
    pub idempotency_ttl_secs: u64,
    /// An incomplete multipart upload created through the S3 API is aborted this long after
    /// its creation (its parts and record removed), as S3's AbortIncompleteMultipartUpload
    /// lifecycle rule does.
    #[serde(deserialize_with = "super::units::secs")]
    pub upload_expiry_secs: u64,
    /// Most multipart uploads one access key may have open at once (400 `TooManyUploads`).
    #[serde(deserialize_with = "super::units::int")]
    pub max_uploads_per_key: usize,
    /// Most multipart uploads open at once in one bucket (400 `TooManyUploads`).
    #[serde(deserialize_with = "super::units::int")]
    pub max_uploads_per_bucket: usize,
    /// Most tombstones a bucket keeps (a delete that carries a token leaves one, also for a key
    /// that never existed); past it they are folded into the bucket's floor, which keeps their
    /// tokens (`gate::tombstones`). 0: kept for good.
    #[serde(deserialize_with = "super::units::int")]
    pub max_tombstones_per_bucket: u64,
    /// `text` or `json` (one object per line); `--log-format` overrides it.
    pub log_format: LogFormat,
}

/// How logs are written (`[server] log_format`, `--log-format`). Defined here, not in
/// `crate::logging`, so that the config loader compiles on its own (the fuzz target).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines (ANSI colours on a terminal).
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            data_dir: PathBuf::from("./data"),
            max_body_bytes: 5 * 1024 * 1024 * 1024,
            body_idle_timeout_secs: 30,
            max_header_bytes: 64 * 1024,
            max_unverified_body_bytes: DEFAULT_UNVERIFIED_BODY_BYTES,
            protected_mode: true,
            tls: None,
            shutdown_grace_secs: 30,
            max_connections: 50_000,
            idempotency_ttl_secs: 86_400,
            upload_expiry_secs: DEFAULT_UPLOAD_EXPIRY_SECS,
            max_uploads_per_key: DEFAULT_MAX_UPLOADS_PER_KEY,
            max_uploads_per_bucket: DEFAULT_MAX_UPLOADS_PER_BUCKET,
            max_tombstones_per_bucket: DEFAULT_MAX_TOMBSTONES_PER_BUCKET,
            log_format: LogFormat::Text,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct FenceStoreConfig {
    /// `rocksdb` (one instance, the default) or `etcd` (several instances share the table).
    pub kind: FenceStoreKind,
    /// rocksdb: the table's directory. Defaults to `<data_dir>/fences`.
    pub path: Option<PathBuf>,
    /// etcd: client URLs of the cluster's members (`http://` or `https://`).
    pub endpoints: Vec<String>,
    /// etcd: prepended to every row key, so several deployments can share one etcd.
    pub prefix: String,
    /// etcd: a user of etcd's auth, with its password from a file or an environment variable.
    pub username: Option<String>,
    pub password_file: Option<PathBuf>,
    pub password_env: Option<String>,
    /// etcd over TLS: the CA that signed the members' certificates (PEM).
    pub ca_file: Option<PathBuf>,
    /// etcd over TLS with client certificates (`--client-cert-auth`): fencegate's own.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// etcd: the deadline of each call. A cluster without quorum answers nothing, and a
    /// write then gets 503 FenceStoreUnavailable after this long.
    #[serde(deserialize_with = "super::units::millis")]
    pub timeout_ms: u64,
    /// etcd: how long after its intent a commit's or delete's store request may land. The
    /// request is presigned to expire then, so the store refuses it later; until then other
    /// instances wait for its outcome (503 CommitInProgress if it is not over in about a
    /// second). Whole seconds; large uploads' bodies go in parts before the intent.
    #[serde(deserialize_with = "super::units::secs")]
    pub intent_ttl_secs: u64,
    /// etcd: how long the store may still be applying a commit it admitted just before its
    /// expiry (a large multipart completion, a body still streaming). Instances wait this much
    /// longer than an intent's deadline.
    #[serde(deserialize_with = "super::units::secs")]
    pub store_apply_secs: u64,
    /// etcd: the most any instance's clock may run ahead of the store's. Instances wait this
    /// much longer than an intent's deadline before deciding without its answer.
    #[serde(deserialize_with = "super::units::millis")]
    pub max_clock_skew_ms: u64,
    /// No longer needed: cluster mode was once experimental and started only with this set.
    /// Still accepted, so that older configurations keep working; ignored.
    #[serde(deserialize_with = "super::units::boolean")]
    pub unsafe_experimental_cluster: bool,
}

impl Default for FenceStoreConfig {
    fn default() -> Self {
        FenceStoreConfig {
            kind: FenceStoreKind::Rocksdb,
            path: None,
            endpoints: Vec::new(),
            prefix: "fencegate/".into(),
            username: None,
            password_file: None,
            password_env: None,
            ca_file: None,
            cert_file: None,
            key_file: None,
            timeout_ms: 3000,
            intent_ttl_secs: 10,
            store_apply_secs: 30,
            max_clock_skew_ms: 2000,
            unsafe_experimental_cluster: false,
        }
    }
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum FenceStoreKind {
    Rocksdb,
    Etcd,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BackendConfig {
    /// A local directory. `root` defaults to `<data_dir>/objects`.
    Fs {
        #[serde(default)]
        root: Option<PathBuf>,
    },
    /// Any S3-compatible store, through aws-sdk-s3.
    S3(S3BackendConfig),
    /// An Azure Blob Storage account (or Azurite): one container per fencegate bucket.
    Azure(AzureBackendConfig),
    /// Google Cloud Storage (through a service account's key): one GCS bucket per fencegate
    /// bucket, or a prefix in one.
    Gcs(GcsBackendConfig),
}

/// An S3-compatible store. Without `endpoint` it is AWS; without static keys the SDK's usual
/// chain (environment, profile, instance role) supplies credentials.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3BackendConfig {
    pub endpoint: Option<String>,
    pub region: String,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
    /// Path-style addressing (`endpoint/bucket/key`); defaults to true when `endpoint` is set.
    #[serde(deserialize_with = "super::units::opt_boolean")]
    pub path_style: Option<bool>,
    #[serde(deserialize_with = "super::units::secs")]
    pub connect_timeout_secs: u64,
    /// Longest wait for the next bytes of a response.
    #[serde(deserialize_with = "super::units::secs")]
    pub read_timeout_secs: u64,
    /// The most one store call may take in all, its retries included (a body streamed to the
    /// client after the store's answer began is not counted). Past it the client gets 504
    /// `BackendUnavailable` with `Retry-After`, instead of waiting attempt after attempt.
    #[serde(deserialize_with = "super::units::secs")]
    pub call_timeout_secs: u64,
    /// Attempts for reads (HEAD, GET, LIST, part uploads); conditional commits are never
    /// re-sent blindly.
    #[serde(deserialize_with = "super::units::int")]
    pub read_attempts: u32,
    /// Bodies up to this size are buffered and committed with one PutObject; larger ones
    /// stream into a multipart upload in parts of this size. At least 5 MiB.
    #[serde(deserialize_with = "super::units::bytes")]
    pub multipart_threshold_bytes: u64,
    /// Who decides a commit's condition: the store (`"store"`, the default: the start-up probe
    /// refuses a store that ignores If-Match / If-None-Match) or fencegate alone, under the
    /// scope's lock (`"fencegate"`, for such stores: every conditional request through
    /// fencegate is still decided atomically; a write made around fencegate while it commits
    /// the same key can be overwritten undetected). docs/backends.md, "Stores without
    /// conditional writes".
    pub conditional_writes: Option<ConditionalWrites>,
    /// The older name of `conditional_writes = "fencegate"`, still read.
    #[serde(deserialize_with = "super::units::boolean")]
    pub unsafe_no_conditional_writes: bool,
    /// Start even if the store ignores If-Match on DeleteObject. Deletes are then a HEAD and an
    /// unconditional DELETE: a DELETE that times out and lands late can remove an object a
    /// newer token wrote in between.
    #[serde(deserialize_with = "super::units::boolean")]
    pub unsafe_unconditional_deletes: bool,
    /// A PEM file of CA certificates trusted for an https endpoint, besides the system roots.
    pub ca_file: Option<PathBuf>,
    /// At start-up, multipart uploads under a bucket's prefix that fencegate's upload registry
    /// does not know and that began more than this many seconds ago are aborted (left by a
    /// crash or a cancelled request). 0 aborts every unknown upload.
    #[serde(deserialize_with = "super::units::secs")]
    pub abandoned_upload_secs: u64,
    /// After a commit or delete whose outcome the store did not confirm (a timeout, a reset, a
    /// 5xx), the object is refused (503 `CommitUnresolved`) until the store shows that outcome
    /// or this many seconds have passed: the longest a request can be in flight and still be
    /// applied. 900 is the SigV4 window (stores refuse a request signed 15 minutes earlier).
    #[serde(deserialize_with = "super::units::secs")]
    pub commit_deadline_secs: u64,
}

impl Default for S3BackendConfig {
    fn default() -> Self {
        S3BackendConfig {
            endpoint: None,
            region: "us-east-1".into(),
            access_key_id: None,
            secret_access_key: None,
            path_style: None,
            connect_timeout_secs: 5,
            read_timeout_secs: 30,
            call_timeout_secs: 30,
            read_attempts: 3,
            multipart_threshold_bytes: 8 * 1024 * 1024,
            conditional_writes: None,
            unsafe_no_conditional_writes: false,
            unsafe_unconditional_deletes: false,
            ca_file: None,
            abandoned_upload_secs: 3600,
            commit_deadline_secs: 900,
        }
    }
}

// Hand-written so that a secret can never reach a log line through `{:?}`.
impl std::fmt::Debug for S3BackendConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3BackendConfig")
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("path_style", &self.path_style)
            .field("multipart_threshold_bytes", &self.multipart_threshold_bytes)
            .field("conditional_writes", &self.conditional_writes())
            .field(
                "unsafe_unconditional_deletes",
                &self.unsafe_unconditional_deletes,
            )
            .field("abandoned_upload_secs", &self.abandoned_upload_secs)
            .field("commit_deadline_secs", &self.commit_deadline_secs)
            .finish()
    }
}

impl S3BackendConfig {
    /// Who decides commits' conditions, `unsafe_no_conditional_writes` read as its old name.
    pub fn conditional_writes(&self) -> ConditionalWrites {
        match (self.conditional_writes, self.unsafe_no_conditional_writes) {
            (Some(c), _) => c,
            (None, true) => ConditionalWrites::Fencegate,
            (None, false) => ConditionalWrites::Store,
        }
    }
}

/// Who decides whether a commit's condition holds (`[backends.NAME] conditional_writes`).
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq, Default)]
#[serde(rename_all = "kebab-case")]
pub enum ConditionalWrites {
    /// The store, by If-Match / If-None-Match on each commit: nothing written around
    /// fencegate is ever overwritten. A store that ignores them is refused at start-up.
    #[default]
    Store,
    /// fencegate alone, under the scope's lock, reading the store's version just before the
    /// commit: for stores that ignore conditions.
    Fencegate,
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
    /// Equal tokens pass: one holder may write many times (docs/design.md, contract line 4).
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
    #[serde(deserialize_with = "super::units::int")]
    pub prefix_segments: u32,
    pub tokens: TokenOrder,
    /// Deletes need a token (and leave a tombstone) like writes do.
    #[serde(deserialize_with = "super::units::boolean")]
    pub fenced_deletes: bool,
    pub on_bypass: BypassPolicy,
    /// s3 backends: the store's bucket (defaults to this bucket's name).
    pub backend_bucket: Option<String>,
    /// s3 backends: a key prefix in the store's bucket, so one store bucket can hold several
    /// fencegate buckets (e.g. "team-a/").
    pub backend_prefix: String,
    /// The largest step a write, delete or fence advance may take above the scope's highest
    /// token (from 0 for a fresh scope); unset, any. Guards against one request fencing a
    /// scope at the top of the token space by mistake or on purpose.
    #[serde(deserialize_with = "super::units::opt_int")]
    pub max_token_jump: Option<u64>,
    /// CORS rules for browsers calling the S3 endpoint from other origins
    /// (`[[buckets.NAME.cors]]`); none, no cross-origin request is allowed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cors: Vec<super::cors::CorsRule>,
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
            backend_bucket: None,
            backend_prefix: String::new(),
            max_token_jump: None,
            cors: Vec::new(),
        }
    }
}

/// The S3-compatible gateway (`[s3]`).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3GatewayConfig {
    /// Serve the S3 REST API at all.
    #[serde(deserialize_with = "super::units::boolean")]
    pub enabled: bool,
    /// A second address for the S3 API; unset, it shares the native API's listener (every path
    /// that is not `/v1/...`, `/healthz` or `/metrics`).
    pub listen: Option<String>,
    /// Base domain for virtual-host-style requests (`bucket.domain/key`); unset, only
    /// path-style requests are understood.
    pub domain: Option<String>,
    /// The region clients sign for and GetBucketLocation reports.
    pub region: String,
    /// Most parts a multipart upload may have (S3's own limit is 10000).
    #[serde(deserialize_with = "super::units::int")]
    pub max_parts: u32,
    /// Deprecated: the keys of the S3 gateway only, before `[keys.NAME]` served every
    /// surface. Still read, as read + write + delete on their buckets, with a warning.
    pub keys: BTreeMap<String, S3Key>,
}

impl Default for S3GatewayConfig {
    fn default() -> Self {
        S3GatewayConfig {
            enabled: true,
            listen: None,
            domain: None,
            region: "us-east-1".into(),
            max_parts: 10_000,
            keys: BTreeMap::new(),
        }
    }
}

/// One S3 access key and what it may do.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct S3Key {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// Buckets this key may use; `"*"` is every bucket.
    #[serde(default = "all_buckets")]
    pub buckets: Vec<String>,
    /// Whether the key may write (put, copy, delete, multipart, create and delete buckets).
    #[serde(default = "yes", deserialize_with = "super::units::boolean")]
    pub write: bool,
}

fn all_buckets() -> Vec<String> {
    vec!["*".into()]
}

fn yes() -> bool {
    true
}

impl S3Key {
    pub fn allows_bucket(&self, bucket: &str) -> bool {
        self.buckets.iter().any(|b| b == "*" || b == bucket)
    }
}

// Hand-written so that a secret can never reach a log line through `{:?}`.
impl std::fmt::Debug for S3Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Key")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field("buckets", &self.buckets)
            .field("write", &self.write)
            .finish()
    }
}
