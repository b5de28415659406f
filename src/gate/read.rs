//! Reads: HEAD, GET (whole or a range) and listings. They take no lock and check no token: a
//! read never changes what a later write is judged against.

use super::{no_such_key, scope, Gate, GateError};
use crate::backend::{ByteStream, ListPage, ObjectInfo, ObjectPart};

impl Gate {
    pub async fn head(&self, bucket: &str, key: &str) -> Result<ObjectInfo, GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        entry
            .backend
            .head(bucket, key)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))
    }

    pub async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<(ObjectInfo, ByteStream), GateError> {
        let entry = self.bucket(bucket)?;
        scope::validate_key(key)?;
        entry
            .backend
            .get(bucket, key)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))
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
        entry
            .backend
            .get_range(bucket, key, start, end)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))
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
        entry
            .backend
            .get_part(bucket, key, number, body)
            .await?
            .ok_or_else(|| no_such_key(bucket, key))
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
        Ok(entry.backend.list(bucket, prefix, start_after, max).await?)
    }
}
