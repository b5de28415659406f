//! Reads: HEAD, GET (whole or a range) and listings. They take no lock and check no token: a
//! read never changes what a later write is judged against.
//!
//! An object fencegate wrote whole but a store keeps as a multipart upload (an s3 backend
//! splits a large body) answers the ETag fencegate recorded for it, the MD5 of its bytes, while
//! the store still holds that version; any other object answers the store's ETag.

use super::{no_such_key, scope, Gate, GateError};
use crate::backend::{ByteStream, ListPage, ObjectInfo, ObjectPart};
use futures::StreamExt;

impl Gate {
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectInfo, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let info = entry
            .backend
            .head(bucket, key)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))?;
        Ok(self.visible(bucket, info).await)
    }

    /// `info` with the ETag its client was answered, where the store's differs: only for
    /// multipart-shaped ETags (`"…-N"`), so reading an ordinary object costs no row lookup.
    async fn visible(&self, bucket: &str, mut info: ObjectInfo) -> ObjectInfo {
        if !info.etag.contains('-') {
            return info;
        }
        let row = match self.store.get(&scope::object_row(bucket, &info.key)).await {
            Ok(Some(row)) => row,
            // The store's ETag is still a true one; only a finer one is missed.
            Ok(None) | Err(_) => return info,
        };
        if row.owns_version(Some(&info.version)) {
            if let Some(etag) = row.etag_of(Some(&info.version)) {
                info.etag = etag;
            }
        }
        info
    }

    pub async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(ObjectInfo, ByteStream), GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let (info, body) = entry
            .backend
            .get(bucket, key)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))?;
        Ok((self.visible(bucket, info).await, body))
    }

    /// Bytes `start..=end` of an object (`end` clamped by the backend).
    pub async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<(ObjectInfo, ByteStream), GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let (info, body) = entry
            .backend
            .get_range(bucket, key, start, end)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))?;
        Ok((self.visible(bucket, info).await, body))
    }

    /// Part `number` of an object (GetObject / HeadObject `partNumber`), with its bytes when
    /// `body`.
    pub async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<ObjectPart, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        let mut part = entry
            .backend
            .get_part(bucket, key, number, body)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))?;
        part.info = self.visible(bucket, part.info).await;
        Ok(part)
    }

    /// The buckets served, by name.
    pub fn bucket_names(&self) -> Vec<String> {
        self.buckets.read().keys().cloned().collect()
    }

    pub async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, GateError> {
        let entry = self.bucket(bucket)?;
        let mut page = entry.backend.list(bucket, prefix, start_after, max).await?;
        // fencegate's own objects (the place's claim, probes in progress) are not the client's.
        // A page that held only those is not the end: callers take an empty page for an empty
        // bucket (DeleteBucket's check), so the listing goes on past them.
        let mut objects = std::mem::take(&mut page.objects);
        objects.retain(|info| !scope::reserved(&info.key));
        while objects.is_empty() {
            let Some(after) = page.next_start_after.take() else {
                break;
            };
            page = entry
                .backend
                .list(bucket, prefix, Some(&after), max)
                .await?;
            objects = std::mem::take(&mut page.objects);
            objects.retain(|info| !scope::reserved(&info.key));
        }
        page.objects = futures::stream::iter(objects)
            .map(|info| self.visible(bucket, info))
            .buffered(16)
            .collect()
            .await;
        Ok(page)
    }
}
