//! The start-up sweep of what a crash or a cancelled request left under `.fencegate-probe/`:
//! staging blobs of bodies that never reached their commit, and the blobs of multipart
//! uploads that no client upload in fencegate's registry holds.

use super::{AzureBackend, STAGING, UPLOADS};
use crate::backend::BackendError;
use std::collections::HashSet;
use std::time::Duration;

impl AzureBackend {
    /// Deletes the staging blobs, and the upload blobs whose upload is not in `known`, that
    /// were last written more than `min_age` ago; returns how many.
    pub async fn sweep_staging(
        &self,
        known: &HashSet<String>,
        min_age: Duration,
    ) -> Result<usize, BackendError> {
        let now = crate::wall_clock::now_ms();
        let mut deleted = 0;
        for dir in [STAGING, UPLOADS] {
            let prefix = format!("{}{dir}", self.prefix);
            let mut marker: Option<String> = None;
            loop {
                let page = self
                    .list_blobs(&prefix, marker.as_deref(), 5000, true)
                    .await?;
                for blob in page.blobs {
                    let name = blob.key.strip_prefix(&prefix).unwrap_or_default();
                    let old =
                        now.saturating_sub(blob.last_modified_ms) >= min_age.as_millis() as u64;
                    if old && !(dir == UPLOADS && known.contains(name)) {
                        self.drop_staging(&blob.key).await;
                        deleted += 1;
                    }
                }
                marker = page.next_marker;
                if marker.is_none() {
                    break;
                }
            }
        }
        Ok(deleted)
    }
}
