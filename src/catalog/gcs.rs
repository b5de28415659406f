//! The gcs backend's part of the catalog: one client per backend (one service account), and
//! the checks each bucket on it passes before it is served (the bucket exists, the
//! conditional-write probe, the clocks, the store place's claim).

use super::Backends;
use crate::backend::gcs::{self, GcsBackend, GcsClient};
use crate::backend::Backend;
use crate::config::{BucketPolicy, Config, GcsBackendConfig};
use std::sync::Arc;
use std::time::Duration;

impl Backends {
    /// The gcs backend of `bucket`, its bucket probed and its place claimed first.
    pub(super) async fn build_gcs(
        &mut self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
        cfg: &GcsBackendConfig,
    ) -> Result<Arc<dyn Backend>, String> {
        let name = policy.backend.as_str();
        if !self.gcs.contains_key(name) {
            let client = GcsClient::build(cfg).map_err(|e| format!("backend {name}: {e}"))?;
            self.gcs.insert(name.to_string(), Arc::new(client));
        }
        let store_bucket = policy.backend_bucket.as_deref().unwrap_or(bucket);
        let backend = GcsBackend::new(
            self.gcs[name].clone(),
            store_bucket,
            &policy.backend_prefix,
            cfg.block_size_bytes,
        )
        .with_commit_deadline(Duration::from_secs(cfg.commit_deadline_secs))
        .with_spooler(self.spooler(config));
        let fail = |e: String| format!("bucket {bucket} (gcs backend {name}): {e}");
        backend
            .check_bucket()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let probe = gcs::probe_conditions(&backend)
            .await
            .map_err(|e| fail(format!("the conditional-write probe failed: {e}")))?;
        if !probe.safe() {
            return Err(fail(probe.refusal(&backend.location())));
        }
        tracing::info!(bucket, backend = name, location = %backend.location(), "GCS bucket honours generation preconditions and signed-URL expiry");
        if let Some(etcd) = &config.etcd {
            let ttl = Duration::from_secs(etcd.intent_ttl_secs);
            let skew = Duration::from_millis(etcd.max_clock_skew_ms);
            backend
                .probe_expiry(ttl, skew)
                .await
                .map_err(|e| fail(format!("cluster mode: {e}")))?;
        } else {
            // One instance: a commit's signed URL expires by the service's clock, the gate's hold by
            // this one's, with gcs::CLOCK_MARGIN between them.
            let offset = backend.clock_offset_now().await.map_err(fail)?;
            crate::backend::clock::check_offset(
                offset,
                Duration::from_secs(cfg.commit_deadline_secs),
                gcs::CLOCK_MARGIN,
                crate::backend::clock::Guarding::OneInstance,
            )
            .map_err(fail)?;
        }
        self.claim_store_place(config, bucket, policy, &backend)
            .await
            .map_err(fail)?;
        if let Some(registered) = self
            .sweep_uploads
            .as_ref()
            .filter(|_| config.etcd.is_none())
        {
            let min_age = Duration::from_secs(cfg.abandoned_upload_secs);
            match backend.sweep_staging(registered, min_age).await {
                Ok(0) => {}
                Ok(deleted) => tracing::info!(
                    bucket,
                    deleted,
                    "deleted abandoned staging and upload objects (left by a crash or a cancelled request)"
                ),
                // Only storage is at stake, not correctness: serve anyway.
                Err(e) => {
                    tracing::warn!(bucket, error = %e, "could not sweep abandoned staging objects; a lifecycle rule on .fencegate-probe/ can collect them")
                }
            }
        }
        Ok(Arc::new(backend))
    }
}
