//! The probes' scratch space in the store: `<prefix>.fencegate-probe/<run>/<random>`, one run
//! per probe, removed whole when the probe ends (whatever ended it), and runs that a killed
//! process left behind removed by the next probe once they are an hour old (younger ones may
//! be another instance's probe in progress). The place's claim (`claim.rs`) lives here too,
//! and no sweep removes it.

use super::errors::classify;
use super::S3Backend;
use std::time::Duration;

pub(super) const SCRATCH: &str = ".fencegate-probe/";

/// Runs older than this are leftovers: no probe takes that long.
const LEFT_OVER: Duration = Duration::from_secs(3600);

/// A new probe run's name.
pub fn new_run() -> String {
    format!("{:016x}", rand::random::<u64>())
}

impl S3Backend {
    /// A scratch key of run `run`.
    pub(super) fn scratch_key(&self, run: &str) -> String {
        format!(
            "{}{SCRATCH}{run}/{:016x}",
            self.prefix,
            rand::random::<u64>()
        )
    }

    /// Removes every object and aborts every upload of run `run`.
    pub async fn remove_run(&self, run: &str) {
        let prefix = format!("{}{SCRATCH}{run}/", self.prefix);
        self.remove_scratch(&prefix, Duration::ZERO).await;
    }

    /// Removes what probes that ended without cleaning up (a killed process) left, once it is
    /// [`LEFT_OVER`] old.
    pub async fn sweep_left_over_runs(&self) {
        let prefix = format!("{}{SCRATCH}", self.prefix);
        self.remove_scratch(&prefix, LEFT_OVER).await;
    }

    /// Objects and uploads under `prefix` at least `min_age` old, removed. Failures are only
    /// logged: a probe's verdict does not depend on its clean-up.
    async fn remove_scratch(&self, prefix: &str, min_age: Duration) {
        if let Err(e) = self.remove_scratch_objects(prefix, min_age).await {
            tracing::warn!(bucket = %self.bucket, prefix, error = %e, "could not remove the probe's scratch objects");
        }
        if let Err(e) = self.abort_scratch_uploads(prefix, min_age).await {
            tracing::warn!(bucket = %self.bucket, prefix, error = %e, "could not abort the probe's scratch uploads");
        }
    }

    fn old_enough(at_ms: Option<i64>, min_age: Duration) -> bool {
        let now_ms = crate::wall_clock::now_ms() as i64;
        min_age.is_zero()
            || at_ms.is_some_and(|t| now_ms.saturating_sub(t) >= min_age.as_millis() as i64)
    }

    async fn remove_scratch_objects(&self, prefix: &str, min_age: Duration) -> Result<(), String> {
        let mut token: Option<String> = None;
        loop {
            let page = self
                .clients
                .reads
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token.clone())
                .send()
                .await
                .map_err(|e| format!("{:?}", classify("ListObjectsV2", e)))?;
            let claim = self.claim_key();
            for object in page.contents().iter().filter(|o| o.key() != Some(&claim)) {
                let modified = object.last_modified().and_then(|t| t.to_millis().ok());
                if let Some(key) = object.key().filter(|_| Self::old_enough(modified, min_age)) {
                    self.clients
                        .reads
                        .delete_object()
                        .bucket(&self.bucket)
                        .key(key)
                        .send()
                        .await
                        .map_err(|e| format!("{:?}", classify("DeleteObject", e)))?;
                }
            }
            token = page.next_continuation_token().map(str::to_string);
            if token.is_none() {
                return Ok(());
            }
        }
    }

    async fn abort_scratch_uploads(&self, prefix: &str, min_age: Duration) -> Result<(), String> {
        let mut markers: (Option<String>, Option<String>) = (None, None);
        loop {
            let page = self
                .clients
                .reads
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_key_marker(markers.0.clone())
                .set_upload_id_marker(markers.1.clone())
                .send()
                .await
                .map_err(|e| format!("{:?}", classify("ListMultipartUploads", e)))?;
            for upload in page.uploads() {
                let started = upload.initiated().and_then(|t| t.to_millis().ok());
                if let (Some(key), Some(id)) = (upload.key(), upload.upload_id()) {
                    if Self::old_enough(started, min_age) {
                        self.clients
                            .writes
                            .abort_multipart_upload()
                            .bucket(&self.bucket)
                            .key(key)
                            .upload_id(id)
                            .send()
                            .await
                            .map_err(|e| format!("{:?}", classify("AbortMultipartUpload", e)))?;
                    }
                }
            }
            if !page.is_truncated().unwrap_or(false) {
                return Ok(());
            }
            markers = (
                page.next_key_marker().map(str::to_string),
                page.next_upload_id_marker().map(str::to_string),
            );
        }
    }
}
