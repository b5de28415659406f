//! The `[backends.NAME]` table of kind `gcs`: a Google Cloud Storage service account (its key
//! file is read, never printed), the endpoint and the timeouts.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Google Cloud Storage through a service account's key. Without `credentials_file` the file
/// `GOOGLE_APPLICATION_CREDENTIALS` names is read, as Google's own tools do. Only a service
/// account's key can sign the per-commit URLs that expire with the commit's deadline, so other
/// kinds of credentials are refused, saying why.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct GcsBackendConfig {
    /// A service account's JSON key file (`"type": "service_account"`).
    pub credentials_file: Option<PathBuf>,
    /// The XML and JSON APIs' URL: `https://storage.googleapis.com` by default.
    pub endpoint: Option<String>,
    #[serde(deserialize_with = "super::units::secs")]
    pub connect_timeout_secs: u64,
    /// Longest wait for the next bytes of a response.
    #[serde(deserialize_with = "super::units::secs")]
    pub read_timeout_secs: u64,
    /// The most one store call may take in all.
    #[serde(deserialize_with = "super::units::secs")]
    pub call_timeout_secs: u64,
    /// Attempts for reads (HEAD, GET, LIST, staging uploads); commits are never re-sent blindly.
    #[serde(deserialize_with = "super::units::int")]
    pub read_attempts: u32,
    /// Bodies up to this size are committed with one conditional PUT; larger ones, and the
    /// parts of multipart uploads, travel as staging objects of this size that the commit
    /// composes onto the object.
    #[serde(deserialize_with = "super::units::bytes")]
    pub block_size_bytes: u64,
    /// A PEM file of CA certificates trusted for an https endpoint, besides the system roots.
    pub ca_file: Option<PathBuf>,
    /// After a commit or delete whose outcome the store did not confirm, the object is refused
    /// (503 `CommitUnresolved`) until the store shows that outcome or this many seconds have
    /// passed. Each commit and delete goes by a signed URL that expires this long after it is
    /// sent, so the service refuses it later, however long it was held in flight.
    #[serde(deserialize_with = "super::units::secs")]
    pub commit_deadline_secs: u64,
    /// At start-up, staging objects under `.fencegate-probe/` that no client upload in
    /// `<data_dir>/uploads` holds and that were last written more than this many seconds ago
    /// are deleted (left by a crash or a cancelled request). One instance only.
    #[serde(deserialize_with = "super::units::secs")]
    pub abandoned_upload_secs: u64,
}

impl Default for GcsBackendConfig {
    fn default() -> Self {
        GcsBackendConfig {
            credentials_file: None,
            endpoint: None,
            connect_timeout_secs: 5,
            read_timeout_secs: 30,
            call_timeout_secs: 30,
            read_attempts: 3,
            block_size_bytes: 8 * 1024 * 1024,
            ca_file: None,
            commit_deadline_secs: 900,
            abandoned_upload_secs: 3600,
        }
    }
}
