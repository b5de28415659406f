//! Reading objects back: GetObject, its body as fencegate's stream.

use super::*;

impl S3Backend {
    /// GetObject, whole or a byte range; the info describes the whole object either way.
    pub(super) async fn get_object(
        &self,
        key: &str,
        range: Option<(u64, u64)>,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        let out = match self
            .clients
            .reads
            .get_object()
            .bucket(&self.bucket)
            .key(self.store_key(key))
            .set_range(range.map(|(s, e)| format!("bytes={s}-{e}")))
            .send()
            .await
        {
            Ok(out) => out,
            Err(e) => {
                return match classify("GetObject", e) {
                    S3Failure::NotFound => Ok(None),
                    other => Err(other.into_backend("GetObject")),
                }
            }
        };
        // A ranged answer's Content-Length is the range's; the total follows the `/`.
        let total = out
            .content_range()
            .and_then(|r| r.rsplit('/').next())
            .and_then(|t| t.parse::<i64>().ok())
            .or(out.content_length());
        let info = Self::info(
            key,
            out.e_tag(),
            total,
            out.last_modified(),
            Self::object_meta(out.content_type(), out.metadata(), system_of!(out)),
        );
        let stream = futures::stream::unfold(out.body, |mut body| async move {
            body.next()
                .await
                .map(|chunk| (chunk.map_err(|e| BodyError::Broken(e.to_string())), body))
        });
        Ok(Some((info, Box::pin(stream))))
    }
}
