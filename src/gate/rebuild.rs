//! Rebuilding a bucket's fence rows from the objects themselves, for an operator who lost the
//! data directory: each object carries the token that wrote it (`x-amz-meta-fencing-token` on
//! s3, the trailer on fs), so the highest token per scope is the maximum over its objects.
//! Tombstones cannot be recovered: a deleted object left nothing behind to read.

use super::{scope, Gate, GateError};
use crate::config::ScopeKind;
use crate::fence::{Durability, FenceRow};
use std::collections::BTreeMap;

/// What a rebuild found and wrote.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RebuildReport {
    pub objects: u64,
    /// Objects that carry no token (written with fencing off or optional).
    pub untokened: u64,
    pub scopes: u64,
    /// Scopes whose recorded highest token was raised.
    pub raised: u64,
}

const PAGE: usize = 1000;

impl Gate {
    /// Scans the bucket and raises each scope's highest token to the maximum found on its
    /// objects (never lowers one), and records each object's current version as fencegate's.
    /// `progress` is called after every page with the objects scanned so far.
    pub async fn rebuild(
        &self,
        bucket: &str,
        mut progress: impl FnMut(u64),
    ) -> Result<RebuildReport, GateError> {
        let entry = self.bucket(bucket)?;
        if entry.policy.scope == ScopeKind::Header {
            return Err(GateError::InvalidArgument(format!(
                "bucket {bucket} uses scope = \"header\": the scope names clients sent are not stored on objects, so they cannot be rebuilt"
            )));
        }
        let mut report = RebuildReport::default();
        let mut highest: BTreeMap<String, u64> = BTreeMap::new();
        let mut start_after: Option<String> = None;
        loop {
            let page = entry
                .backend
                .list(bucket, "", start_after.as_deref(), PAGE)
                .await?;
            // fencegate's own objects (the place's claim) are not the client's to fence.
            for listed in page.objects.iter().filter(|o| !scope::reserved(&o.key)) {
                // Listings carry no metadata: read each object's head for its token.
                let Some(info) = entry.backend.head(bucket, &listed.key).await? else {
                    continue;
                };
                report.objects += 1;
                let scope = scope::resolve(&entry.policy, bucket, &info.key, None)?;
                match info.meta.token {
                    Some(t) => {
                        let h = highest.entry(scope).or_insert(t);
                        *h = (*h).max(t);
                    }
                    None => report.untokened += 1,
                }
                let object_key = scope::object_row(bucket, &info.key);
                let mut row = self.row(&object_key).await?;
                row.version = Some(info.version.clone());
                row.etag = Some(info.etag.clone());
                row.pending = None;
                row.tombstone = false;
                self.store
                    .put(vec![(object_key, row)], Durability::Lazy)
                    .await?;
            }
            progress(report.objects);
            match page.next_start_after {
                Some(next) => start_after = Some(next),
                None => break,
            }
        }
        report.scopes = highest.len() as u64;
        let mut rows = Vec::new();
        for (scope, token) in highest {
            let mut row: FenceRow = self.row(&scope).await?;
            if row.highest.is_none_or(|h| h < token) {
                row.highest = Some(token);
                report.raised += 1;
                rows.push((scope, row));
            }
        }
        // One synced put at the end makes every row above durable.
        self.store.put(rows, Durability::Synced).await?;
        Ok(report)
    }
}
