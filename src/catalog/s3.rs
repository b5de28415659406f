//! The s3 backend's part of the catalog: one set of clients per store, and the checks each
//! bucket on a store passes before it is served (the bucket exists, the conditional-write
//! probe, in cluster mode the presigned-expiry probe, the sweep of abandoned uploads).

use super::{Backends, StartupError};
use crate::backend::s3::{self, S3Backend};
use crate::backend::Backend;
use crate::config::{BucketPolicy, Config, S3BackendConfig};
use std::sync::Arc;
use std::time::Duration;

impl Backends {
    /// The s3 backend of `bucket`, its store probed (and, at start-up, swept) first.
    pub(super) async fn build_s3(
        &mut self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
        s3cfg: &S3BackendConfig,
    ) -> Result<Arc<dyn Backend>, String> {
        let name = policy.backend.as_str();
        if !self.s3.contains_key(name) {
            self.s3.insert(
                name.to_string(),
                s3::build_clients(s3cfg)
                    .await
                    .map_err(|e| format!("backend {name}: {e}"))?,
            );
        }
        let store_bucket = policy.backend_bucket.as_deref().unwrap_or(bucket);
        let backend = S3Backend::new(
            self.s3[name].clone(),
            store_bucket,
            &policy.backend_prefix,
            s3cfg.multipart_threshold_bytes,
        )
        .with_commit_deadline(Duration::from_secs(s3cfg.commit_deadline_secs))
        .with_spooler(self.spooler(config));
        prepare_s3(bucket, name, s3cfg, &backend)
            .await
            .map_err(|e| e.to_string())?;
        // Before anything is served from the place, and on every path that serves one (start-up
        // and buckets created later): no other fence table may be fencing it.
        let Some(table_id) = self.table_id.as_deref() else {
            return Err(format!(
                "bucket {bucket}: the fence table is not open, so the store place cannot be claimed; this is a bug in fencegate"
            ));
        };
        let place = format!(
            "store place {} (bucket {bucket}, backend {name})",
            config.namespace(bucket, policy)
        );
        let honours = s3cfg.conditional_writes() != crate::config::ConditionalWrites::Fencegate;
        // `fences rebuild` claims only the place of the bucket it rebuilds: the others are not
        // served by it, and their claims (another table's, when the data directory was lost)
        // are for their own rebuilds to take over.
        let take_over = self
            .take_over_claim
            .as_deref()
            .map(|rebuilt| rebuilt == bucket);
        if take_over != Some(false) {
            super::claim::claim_place(
                &backend,
                (table_id, bucket),
                &place,
                honours,
                take_over == Some(true),
                config.etcd.is_some(),
            )
            .await
            .map_err(|e| format!("bucket {bucket} (s3 backend {name}): {e}"))?;
        }
        // Several instances: another one's uploads in progress are not in this
        // instance's registry, and must not be taken for abandoned ones.
        let shared = config.etcd.is_some();
        if let Some(etcd) = &config.etcd {
            let ttl = Duration::from_secs(etcd.intent_ttl_secs);
            let skew = Duration::from_millis(etcd.max_clock_skew_ms);
            backend
                .probe_expiry(ttl, skew)
                .await
                .map_err(|e| format!("bucket {bucket} (s3 backend {name}), cluster mode: {e}"))?;
        }
        if shared && self.sweep_uploads.is_some() {
            tracing::info!(bucket, "not sweeping abandoned multipart uploads: the fence table is shared, and other instances' uploads are not in this one's registry; let the store's lifecycle rules (AbortIncompleteMultipartUpload) collect them");
        }
        if let Some(registered) = self.sweep_uploads.as_ref().filter(|_| !shared) {
            let min_age = Duration::from_secs(s3cfg.abandoned_upload_secs);
            match backend.sweep_uploads(registered, min_age).await {
                Ok(0) => {}
                Ok(aborted) => tracing::info!(
                    bucket,
                    aborted,
                    "aborted abandoned multipart uploads (left by a crash or a cancelled request)"
                ),
                // Only storage is at stake, not correctness: serve anyway.
                Err(e) => {
                    tracing::warn!(bucket, error = %e, "could not sweep abandoned multipart uploads; the store's lifecycle rules (AbortIncompleteMultipartUpload) can collect them")
                }
            }
        }
        Ok(Arc::new(backend))
    }
}

/// Checks the store bucket exists and runs the conditional-write probe on it.
async fn prepare_s3(
    bucket: &str,
    backend_name: &str,
    cfg: &S3BackendConfig,
    backend: &S3Backend,
) -> Result<(), StartupError> {
    let fail = |message: String| StartupError::S3 {
        bucket: bucket.to_string(),
        backend: backend_name.to_string(),
        message,
    };
    backend
        .check_bucket()
        .await
        .map_err(|e| fail(e.to_string()))?;
    let verdict =
        super::store_probe::probe(backend, cfg, backend_name, super::store_probe::RACE_WRITERS)
            .await
            .map_err(|e| fail(format!("the conditional-write probe failed: {e}")))?;
    if !verdict.etags_are_md5 {
        tracing::warn!(bucket, backend = backend_name, "the store's ETags are not MD5s of the bytes (SSE-KMS?): fencegate cannot compare them with what it sent; the store's own Content-MD5 check still applies");
    }
    if verdict.safe {
        tracing::info!(bucket, backend = backend_name, location = %backend.location(), "s3 store honours conditional writes and deletes");
        return Ok(());
    }
    // Each ignored condition needs its own setting: they lose different guarantees. The
    // unsafe ones are repeated at ERROR; conditional_writes = "fencegate" is a documented mode
    // (docs/backends.md), said once.
    for accepted in &verdict.accepted {
        if accepted.starts_with("UNSAFE") {
            for _ in 0..3 {
                tracing::error!(bucket, backend = backend_name, "{accepted}");
            }
        } else {
            tracing::warn!(bucket, backend = backend_name, "{accepted}");
        }
    }
    if verdict.refusals.is_empty() {
        Ok(())
    } else {
        Err(fail(verdict.refusals.join("; and ")))
    }
}
