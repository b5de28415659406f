//! The azure backend's part of the catalog: one client per account, and the checks each
//! bucket on it passes before it is served (the container exists, the conditional-write
//! probe, the store place's claim).

use super::Backends;
use crate::backend::azure::{self, AzureBackend, AzureClient};
use crate::backend::Backend;
use crate::config::{AzureBackendConfig, BucketPolicy, Config};
use std::sync::Arc;
use std::time::Duration;

impl Backends {
    /// The azure backend of `bucket`, its container probed and its place claimed first.
    pub(super) async fn build_azure(
        &mut self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
        cfg: &AzureBackendConfig,
    ) -> Result<Arc<dyn Backend>, String> {
        let name = policy.backend.as_str();
        if !self.azure.contains_key(name) {
            let client = AzureClient::build(cfg).map_err(|e| format!("backend {name}: {e}"))?;
            self.azure.insert(name.to_string(), Arc::new(client));
        }
        let container = policy.backend_bucket.as_deref().unwrap_or(bucket);
        let backend = AzureBackend::new(
            self.azure[name].clone(),
            container,
            &policy.backend_prefix,
            cfg.block_size_bytes,
        )
        .with_commit_deadline(Duration::from_secs(cfg.commit_deadline_secs))
        .with_spooler(self.spooler(config));
        let fail = |e: String| format!("bucket {bucket} (azure backend {name}): {e}");
        backend
            .check_container()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let probe = azure::probe_conditions(&backend)
            .await
            .map_err(|e| fail(format!("the conditional-write probe failed: {e}")))?;
        if !probe.safe() {
            return Err(fail(probe.refusal(&backend.location())));
        }
        tracing::info!(bucket, backend = name, location = %backend.location(), "azure container honours conditional writes and deletes");
        if let Some(etcd) = &config.etcd {
            let ttl = Duration::from_secs(etcd.intent_ttl_secs);
            let skew = Duration::from_millis(etcd.max_clock_skew_ms);
            backend
                .probe_expiry(ttl, skew)
                .await
                .map_err(|e| fail(format!("cluster mode: {e}")))?;
        } else {
            // One instance: a commit's SAS expires by the service's clock, the gate's hold by
            // this one's, with azure::CLOCK_MARGIN between them.
            let offset = backend.clock_offset_now().await.map_err(fail)?;
            crate::backend::clock::check_offset(
                offset,
                Duration::from_secs(cfg.commit_deadline_secs),
                azure::CLOCK_MARGIN,
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
                    "deleted abandoned staging and upload blobs (left by a crash or a cancelled request)"
                ),
                // Only storage is at stake, not correctness: serve anyway.
                Err(e) => {
                    tracing::warn!(bucket, error = %e, "could not sweep abandoned staging blobs; a lifecycle rule on .fencegate-probe/ can collect them")
                }
            }
        }
        Ok(Arc::new(backend))
    }
}
