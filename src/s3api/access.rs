//! Who may do what on the S3 gateway: SigV4 secrets looked up in the configured keys (an
//! unknown key is InvalidAccessKeyId, a bad signature SignatureDoesNotMatch, both from `s3s`),
//! then per key the buckets it may use and whether it may write (AccessDenied otherwise).
//! Lease-bound credentials (issued with a lease) are looked up too: they may write the lease's
//! bound bucket, and every write signed with them carries the lease's token.

use crate::config::S3Key;
use crate::lease::{LeaseIdentity, Leases};
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{s3_error, S3Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The configured keys, by access key id, and the lease service's short-lived ones.
#[derive(Default)]
pub struct KeyTable {
    keys: BTreeMap<String, S3Key>,
    leases: Option<Arc<Leases>>,
}

impl KeyTable {
    pub fn new(keys: impl IntoIterator<Item = S3Key>) -> KeyTable {
        KeyTable {
            keys: keys
                .into_iter()
                .map(|k| (k.access_key_id.clone(), k))
                .collect(),
            leases: None,
        }
    }

    /// Also accepts lease-bound credentials issued by `leases`.
    pub fn with_leases(mut self, leases: Arc<Leases>) -> KeyTable {
        self.leases = Some(leases);
        self
    }

    fn lease_identity(&self, access_key: &str) -> Option<LeaseIdentity> {
        self.leases
            .as_ref()
            .and_then(|l| l.credentials.identity(access_key))
    }

    /// The token a request signed with lease credentials carries implicitly.
    pub fn lease_token(&self, credentials: Option<&s3s::auth::Credentials>) -> Option<u64> {
        credentials
            .and_then(|c| self.lease_identity(&c.access_key))
            .map(|i| i.token)
    }

    /// May the holder of `access_key` (None: anonymous) read `bucket`?
    pub fn may_read(&self, access_key: Option<&str>, bucket: &str) -> bool {
        let Some(access_key) = access_key else {
            return false;
        };
        if let Some(k) = self.keys.get(access_key) {
            return k.allows_bucket(bucket);
        }
        // Lease credentials reach their lease's bound bucket (every bucket when unbound).
        self.lease_identity(access_key)
            .is_some_and(|i| i.bucket.as_deref().is_none_or(|b| b == bucket))
    }

    fn may_write(&self, access_key: Option<&str>, bucket: &str) -> bool {
        self.may_read(access_key, bucket)
            && access_key.is_some_and(|a| {
                self.keys
                    .get(a)
                    .map_or_else(|| self.lease_identity(a).is_some(), |k| k.write)
            })
    }
}

/// Operations that change something. Everything else reads.
fn is_write(op: &str) -> bool {
    [
        "Put", "Delete", "Create", "Upload", "Complete", "Abort", "Copy", "Restore", "Post",
    ]
    .iter()
    .any(|p| op.starts_with(p))
}

pub struct Auth(pub Arc<KeyTable>);

#[async_trait::async_trait]
impl S3Auth for Auth {
    async fn get_secret_key(&self, access_key: &str) -> S3Result<SecretKey> {
        if let Some(k) = self.0.keys.get(access_key) {
            return Ok(SecretKey::from(k.secret_access_key.as_str()));
        }
        if let Some(leases) = &self.0.leases {
            if let Some(secret) = leases.credentials.secret(access_key) {
                return Ok(SecretKey::from(secret.as_str()));
            }
            if leases.credentials.identity(access_key).is_some() {
                return Err(s3_error!(
                    InvalidAccessKeyId,
                    "these lease credentials expired with their lease (plus the grace period); acquire the lease again for new ones"
                ));
            }
        }
        Err(s3_error!(
            InvalidAccessKeyId,
            "the access key id is not configured in [s3.keys] and is not a live lease credential"
        ))
    }
}

pub struct Access(pub Arc<KeyTable>);

#[async_trait::async_trait]
impl S3Access for Access {
    async fn check(&self, cx: &mut S3AccessContext<'_>) -> S3Result<()> {
        let access_key = cx.credentials().map(|c| c.access_key.clone());
        let Some(access_key) = access_key else {
            return Err(s3_error!(
                AccessDenied,
                "anonymous requests are refused; sign requests with a key from [s3.keys]"
            ));
        };
        let op = cx.s3_op().name().to_string();
        let bucket = match cx.s3_path() {
            S3Path::Root => return Ok(()),
            S3Path::Bucket { bucket } | S3Path::Object { bucket, .. } => bucket.to_string(),
        };
        let allowed = if is_write(&op) {
            self.0.may_write(Some(&access_key), &bucket)
        } else {
            self.0.may_read(Some(&access_key), &bucket)
        };
        if allowed {
            Ok(())
        } else {
            tracing::info!(access_key, op, bucket, "access denied");
            Err(s3_error!(
                AccessDenied,
                "this access key may not {} bucket {bucket}",
                if is_write(&op) { "write to" } else { "read" }
            ))
        }
    }
}
