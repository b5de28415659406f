//! The buckets the gate serves: each one's policy and backend, and the registry that S3's
//! CreateBucket and DeleteBucket change while requests run (with the writes in flight that
//! DeleteBucket waits for, `inflight.rs`).

use super::inflight::{self, Closing, WriteTicket};
use super::{Gate, GateError};
use crate::backend::Backend;
use crate::config::BucketPolicy;
use std::sync::Arc;

/// A bucket as the gate sees it: its policy and the backend behind it.
pub struct BucketEntry {
    pub policy: BucketPolicy,
    pub backend: Arc<dyn Backend>,
    /// Shared with the entry a policy reload replaces this one by, so that DeleteBucket still
    /// sees the writes admitted under the old policy.
    pub(super) in_flight: Arc<inflight::InFlight>,
    /// When fencegate first served the bucket (Unix ms; 0 when not known).
    pub created_ms: u64,
}

impl BucketEntry {
    pub fn new(policy: BucketPolicy, backend: Arc<dyn Backend>) -> BucketEntry {
        BucketEntry {
            policy,
            backend,
            in_flight: Default::default(),
            created_ms: 0,
        }
    }

    pub fn created_at(mut self, ms: u64) -> BucketEntry {
        self.created_ms = ms;
        self
    }
}

impl Gate {
    /// When the bucket was first served (Unix ms), for ListBuckets; 0 when not known.
    pub fn bucket_created_ms(&self, name: &str) -> u64 {
        self.bucket(name).map_or(0, |b| b.created_ms)
    }

    pub fn bucket(&self, name: &str) -> Result<Arc<BucketEntry>, GateError> {
        self.buckets
            .read()
            .get(name)
            .cloned()
            .ok_or_else(|| GateError::NoSuchBucket(name.to_string()))
    }

    /// The policies of these buckets from now on (a configuration reload): each entry is
    /// replaced whole, with its backend and its writes in flight. Every request admitted after
    /// this returns sees the new policy, and so does the token check under the scope's lock
    /// of every write and delete still in flight (`Gate::lock_checks`). The caller has checked that each change keeps the bucket's scope kind (which keys
    /// the fence rows) and its backend. Buckets not served are skipped and returned.
    pub fn replace_policies(
        &self,
        policies: &std::collections::BTreeMap<String, BucketPolicy>,
    ) -> Vec<String> {
        let mut buckets = self.buckets.write();
        let mut missing = Vec::new();
        for (name, policy) in policies {
            let Some(old) = buckets.get(name) else {
                missing.push(name.clone());
                continue;
            };
            let entry = BucketEntry {
                policy: policy.clone(),
                backend: old.backend.clone(),
                in_flight: old.in_flight.clone(),
                created_ms: old.created_ms,
            };
            buckets.insert(name.clone(), Arc::new(entry));
        }
        missing
    }

    /// Serves a new bucket; false if one by that name exists. Its fence rows, if a bucket by
    /// that name existed before, still apply: a zombie of the old bucket stays fenced.
    pub fn add_bucket(&self, name: &str, entry: BucketEntry) -> bool {
        let mut buckets = self.buckets.write();
        if buckets.contains_key(name) {
            return false;
        }
        buckets.insert(name.to_string(), Arc::new(entry));
        true
    }

    /// Closes a bucket to new writes, refused while one is in flight (DeleteBucket's first
    /// step: the caller then checks that the bucket is empty, and removes it).
    pub fn close_bucket(&self, name: &str) -> Result<Closing, GateError> {
        Closing::close(self.bucket(name)?, name)
    }

    /// Stops serving a bucket closed by `close_bucket` (the caller checked it is empty).
    pub fn remove_bucket(&self, name: &str, closing: Closing) {
        self.buckets.write().remove(name);
        closing.finish();
    }

    /// DeleteBucket's last check, on a closed bucket: refuses (`CommitUnresolved`) while a
    /// store request for one of its objects got no answer and may still land, which would
    /// put an object in a bucket answered deleted. Finds them by scanning the bucket's object
    /// rows; the store is asked whether each one's request landed.
    pub async fn bucket_settled(&self, name: &str) -> Result<(), GateError> {
        let entry = self.bucket(name)?;
        let store = self.store.clone();
        let prefix = super::scope::object_row(name, "");
        let now = crate::wall_clock::now_ms();
        let pending = tokio::task::spawn_blocking(move || {
            let mut found = Vec::new();
            store.scan_prefix(&prefix, &mut |key, row| {
                // An intent left by a crash has no deadline of its own: its pending version
                // alone marks a request that may still land.
                if row.unresolved_until_ms.is_some_and(|until| until > now) || row.pending.is_some()
                {
                    found.push((key[prefix.len()..].to_string(), row.clone()));
                }
                true
            })?;
            Ok::<_, GateError>(found)
        })
        .await
        .map_err(|e| GateError::Internal(format!("the fence-table scan failed: {e}")))??;
        for (key, row) in pending {
            self.still_unresolved(&entry, name, &key, &row).await?;
        }
        Ok(())
    }

    /// The bucket, for a request that changes it: held until the change has ended.
    pub(super) fn bucket_for_write(&self, name: &str) -> Result<WriteTicket, GateError> {
        WriteTicket::take(self.bucket(name)?, name)
    }
}
