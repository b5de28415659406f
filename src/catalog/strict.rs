//! The catalog's part for the stores with no opt-in (azure, gcs): one client per configured
//! backend (an account, a service account), and the checks each bucket on it passes before it
//! is served, in one sequence for both kinds: the bucket exists, the conditional-write probe,
//! the clocks (or cluster mode's expiry checks), the store place's claim, and the sweep of what
//! a crash left under `.fencegate-probe/`.

use super::Backends;
use crate::backend::claim::ClaimStore;
use crate::backend::strict::StrictStore;
use crate::backend::Backend;
use crate::config::{BucketPolicy, Config};
use std::sync::Arc;
use std::time::Duration;

/// What the checks need of a strict backend's configuration.
pub(super) struct Limits {
    pub commit_deadline_secs: u64,
    pub abandoned_upload_secs: u64,
}

impl Backends {
    /// The azure backend of `bucket`, its container probed and its place claimed first.
    #[cfg(feature = "azure")]
    pub(super) async fn build_azure(
        &mut self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
        cfg: &crate::config::AzureBackendConfig,
    ) -> Result<Arc<dyn Backend>, String> {
        use crate::backend::azure::{AzureBackend, AzureClient};
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
        let limits = Limits {
            commit_deadline_secs: cfg.commit_deadline_secs,
            abandoned_upload_secs: cfg.abandoned_upload_secs,
        };
        self.checked(config, bucket, policy, backend, limits).await
    }

    /// The gcs backend of `bucket`, its bucket probed and its place claimed first.
    #[cfg(feature = "gcs")]
    pub(super) async fn build_gcs(
        &mut self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
        cfg: &crate::config::GcsBackendConfig,
    ) -> Result<Arc<dyn Backend>, String> {
        use crate::backend::gcs::{GcsBackend, GcsClient};
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
        let limits = Limits {
            commit_deadline_secs: cfg.commit_deadline_secs,
            abandoned_upload_secs: cfg.abandoned_upload_secs,
        };
        self.checked(config, bucket, policy, backend, limits).await
    }

    /// `backend`, once every check a strict store passes before it serves `bucket` has.
    async fn checked<B: StrictStore + ClaimStore>(
        &self,
        config: &Config,
        bucket: &str,
        policy: &BucketPolicy,
        backend: B,
        limits: Limits,
    ) -> Result<Arc<dyn Backend>, String> {
        let name = policy.backend.as_str();
        let fail = |e: String| format!("bucket {bucket} ({} backend {name}): {e}", B::KIND);
        backend
            .check_exists()
            .await
            .map_err(|e| fail(e.to_string()))?;
        let probe = backend
            .probe_conditions()
            .await
            .map_err(|e| fail(format!("the conditional-write probe failed: {e}")))?;
        if !probe.safe() {
            return Err(fail(backend.refusal(&probe)));
        }
        tracing::info!(bucket, backend = name, kind = B::KIND, location = %StrictStore::location(&backend), "the store honours every condition fencegate's commits rely on");
        if let Some(etcd) = &config.etcd {
            let ttl = Duration::from_secs(etcd.intent_ttl_secs);
            let skew = Duration::from_millis(etcd.max_clock_skew_ms);
            StrictStore::probe_expiry(&backend, ttl, skew)
                .await
                .map_err(|e| fail(format!("cluster mode: {e}")))?;
        } else {
            // One instance: a commit's credential expires by the service's clock, the gate's
            // hold by this one's, with the backend's clock margin between them.
            let offset = StrictStore::clock_offset_now(&backend)
                .await
                .map_err(fail)?;
            crate::backend::clock::check_offset(
                offset,
                Duration::from_secs(limits.commit_deadline_secs),
                B::CLOCK_MARGIN,
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
            let min_age = Duration::from_secs(limits.abandoned_upload_secs);
            match StrictStore::sweep_staging(&backend, registered, min_age).await {
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
