//! Who may do what on the S3 gateway: SigV4 secrets looked up in the configured keys (an
//! unknown key is InvalidAccessKeyId, a bad signature SignatureDoesNotMatch, both from `s3s`),
//! then per key the buckets it may use and whether it may write (AccessDenied otherwise).

use crate::config::S3Key;
use s3s::access::{S3Access, S3AccessContext};
use s3s::auth::{S3Auth, SecretKey};
use s3s::path::S3Path;
use s3s::{s3_error, S3Result};
use std::collections::BTreeMap;
use std::sync::Arc;

/// The configured keys, by access key id.
#[derive(Default)]
pub struct KeyTable {
    keys: BTreeMap<String, S3Key>,
}

impl KeyTable {
    pub fn new(keys: impl IntoIterator<Item = S3Key>) -> KeyTable {
        KeyTable {
            keys: keys
                .into_iter()
                .map(|k| (k.access_key_id.clone(), k))
                .collect(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// May the holder of `access_key` (None: anonymous) read `bucket`?
    pub fn may_read(&self, access_key: Option<&str>, bucket: &str) -> bool {
        access_key
            .and_then(|a| self.keys.get(a))
            .is_some_and(|k| k.allows_bucket(bucket))
    }

    fn may_write(&self, access_key: Option<&str>, bucket: &str) -> bool {
        self.may_read(access_key, bucket)
            && access_key
                .and_then(|a| self.keys.get(a))
                .is_some_and(|k| k.write)
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
        match self.0.keys.get(access_key) {
            Some(k) => Ok(SecretKey::from(k.secret_access_key.as_str())),
            None => Err(s3_error!(
                InvalidAccessKeyId,
                "the access key id is not configured in [s3.keys]"
            )),
        }
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
