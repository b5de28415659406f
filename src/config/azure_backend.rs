//! The `[backends.NAME]` table of kind `azure`: an Azure Blob Storage account, its
//! credentials (never printed) and its timeouts.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// An Azure Blob Storage account. Unset fields come from the environment Azure's own tools
/// read: `AZURE_STORAGE_CONNECTION_STRING`, else `AZURE_STORAGE_ACCOUNT` (or
/// `AZURE_STORAGE_ACCOUNT_NAME`) with `AZURE_STORAGE_KEY` (or `AZURE_STORAGE_ACCOUNT_KEY`).
/// A SAS token (`sas_token`, `AZURE_STORAGE_SAS_TOKEN`) is refused, saying why.
#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct AzureBackendConfig {
    /// The storage account's name.
    pub account: Option<String>,
    /// The account's shared key (base64), as the portal shows it.
    pub access_key: Option<String>,
    /// A SAS token: refused for now (a commit held in flight could land until the SAS
    /// expires), but read so that the refusal can say so.
    pub sas_token: Option<String>,
    /// The blob service's URL: `https://ACCOUNT.blob.core.windows.net` by default; for
    /// Azurite, `http://127.0.0.1:10000/devstoreaccount1`.
    pub endpoint: Option<String>,
    #[serde(deserialize_with = "super::units::secs")]
    pub connect_timeout_secs: u64,
    /// Longest wait for the next bytes of a response.
    #[serde(deserialize_with = "super::units::secs")]
    pub read_timeout_secs: u64,
    /// The most one store call may take in all, its retries included.
    #[serde(deserialize_with = "super::units::secs")]
    pub call_timeout_secs: u64,
    /// Attempts for reads (HEAD, GET, LIST, block uploads); commits are never re-sent blindly.
    #[serde(deserialize_with = "super::units::int")]
    pub read_attempts: u32,
    /// Bodies up to this size are committed with one conditional Put Blob; larger ones, and
    /// the parts of multipart uploads, travel as blocks of this size.
    #[serde(deserialize_with = "super::units::bytes")]
    pub block_size_bytes: u64,
    /// A PEM file of CA certificates trusted for an https endpoint, besides the system roots.
    pub ca_file: Option<PathBuf>,
    /// After a commit or delete whose outcome the store did not confirm, the object is refused
    /// (503 `CommitUnresolved`) until the store shows that outcome or this many seconds have
    /// passed. Each commit and delete carries a SAS that expires this long after it is sent, so
    /// the service refuses it later, however long it was held in flight.
    #[serde(deserialize_with = "super::units::secs")]
    pub commit_deadline_secs: u64,
    /// At start-up, staging blobs and multipart uploads' blobs under `.fencegate-probe/` that
    /// no client upload in `<data_dir>/uploads` holds and that were last written more than this
    /// many seconds ago are deleted (left by a crash or a cancelled request). One instance
    /// only: in cluster mode another instance's are not in this one's registry.
    #[serde(deserialize_with = "super::units::secs")]
    pub abandoned_upload_secs: u64,
}

impl Default for AzureBackendConfig {
    fn default() -> Self {
        AzureBackendConfig {
            account: None,
            access_key: None,
            sas_token: None,
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

// Hand-written so that a secret can never reach a log line through `{:?}`.
impl std::fmt::Debug for AzureBackendConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AzureBackendConfig")
            .field("account", &self.account)
            .field(
                "access_key",
                &self.access_key.as_ref().map(|_| "<redacted>"),
            )
            .field("sas_token", &self.sas_token.as_ref().map(|_| "<redacted>"))
            .field("endpoint", &self.endpoint)
            .field("block_size_bytes", &self.block_size_bytes)
            .field("commit_deadline_secs", &self.commit_deadline_secs)
            .finish()
    }
}
