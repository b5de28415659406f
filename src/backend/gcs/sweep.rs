//! The start-up sweep of what a crash or a cancelled request left under `.fencegate-probe/`:
//! the pieces of bodies that never reached their commit, and the pieces of multipart uploads
//! that no client upload in fencegate's registry holds.

use super::{GcsBackend, STAGING, UPLOADS};
use crate::backend::BackendError;
use std::collections::HashSet;
use std::time::Duration;

impl GcsBackend {
    /// Deletes the staging objects, and the upload pieces whose upload is not in `known`, that
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
            let mut after: Option<String> = None;
            loop {
                let page = self.list_objects(&prefix, after.as_deref(), 1000).await?;
                for object in &page.objects {
                    let rest = object.key.strip_prefix(&prefix).unwrap_or_default();
                    // `uploads/<upload>/<piece>`: the upload is the first segment.
                    let upload = rest.split('/').next().unwrap_or_default();
                    let old =
                        now.saturating_sub(object.last_modified_ms) >= min_age.as_millis() as u64;
                    if old && !(dir == UPLOADS && known.contains(upload)) {
                        self.drop_staging(&object.key).await;
                        deleted += 1;
                    }
                }
                match page.next_start_after {
                    Some(next) => after = Some(next),
                    None => break,
                }
            }
        }
        Ok(deleted)
    }
}
