//! Bodies larger than one block, and multipart uploads, as blocks of a staging blob that only
//! fencegate writes. A large body streams into `<prefix>.fencegate-probe/staging/<id>` one
//! spooled block at a time; a multipart upload's parts go to `.../uploads/<upload>`, each block
//! named by its part number, the part's MD5 and its index, so the completion finds the blocks
//! of exactly the parts it was given. Each block carries its Content-MD5, so the service
//! refuses other bytes.

use super::client::Request;
use super::errors::AzFailure;
use super::*;
use crate::backend::multipart_etag;
use crate::backend::spool::{PartReader, SpooledPart};
use base64::Engine;
use md5::Digest;

/// The Content-Type a blob is stored with: AWS's `binary/octet-stream` for an object written
/// without one, as the s3 backend stores it.
pub(super) fn content_type(meta: &ObjectMeta) -> String {
    meta.content_type
        .clone()
        .unwrap_or_else(|| "binary/octet-stream".into())
}

/// Refuses a key the Blob service would store as another name, or could not list: Azurite
/// turns a backslash into `/`, and Azure drops a trailing dot from a name (two keys, one blob,
/// fenced by two rows); U+FFFE / U+FFFF are not XML, so a listing holding one fails for every
/// key beside it.
pub(super) fn refuse_unstorable(key: &str) -> Result<(), BackendError> {
    if key.split('/').any(|segment| segment.ends_with('.')) {
        return Err(BackendError::Invalid {
            code: "InvalidArgument",
            message: "a segment of the key ends with `.`, which Azure Blob Storage drops from a blob's name (so two keys would name one blob): choose a key without it".into(),
        });
    }
    if let Some(c) = key
        .chars()
        .find(|c| matches!(c, '\\' | '\u{fffe}' | '\u{ffff}'))
    {
        return Err(BackendError::Invalid {
            code: "InvalidArgument",
            message: format!(
                "the key holds {c:?}, which Azure Blob Storage cannot keep as it is (a backslash is read as `/`; U+FFFE and U+FFFF cannot be listed): choose a key without it"
            ),
        });
    }
    Ok(())
}

/// A block id as the service takes it: base64 of a name of fixed length.
fn block_id(name: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(name)
}

/// Deletes a staging blob whose body did not finish staging (the request was dropped).
struct StagingGuard {
    client: Arc<AzureClient>,
    container: String,
    blob: Option<String>,
}

impl Drop for StagingGuard {
    fn drop(&mut self) {
        let Some(blob) = self.blob.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, container) = (self.client.clone(), std::mem::take(&mut self.container));
        runtime.spawn(async move {
            let req = Request::new(Method::DELETE, &container, &blob);
            match client.send("Delete Blob", req).await {
                Ok(_) | Err(AzFailure::NotFound) => {}
                Err(f) => {
                    let e = f.into_backend("Delete Blob");
                    tracing::warn!(blob, error = %e, "could not delete the staging blob of a cancelled request; the start-up sweep (abandoned_upload_secs) or a lifecycle rule on .fencegate-probe/ collects it")
                }
            }
        });
    }
}

impl AzureBackend {
    pub(super) fn upload_blob(&self, handle: &str) -> String {
        format!("{}{UPLOADS}{handle}", self.prefix)
    }

    /// Put Block: `block` (bytes `start..start+len` of `body`) as block `id` of `blob`. Block
    /// uploads are idempotent, so a failure that may pass is tried again.
    async fn put_block(
        &self,
        blob: &str,
        id: &str,
        body: &Spooled,
        md5: &[u8],
    ) -> Result<(), BackendError> {
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5);
        let req = || {
            Request::new(Method::PUT, &self.container, blob)
                .query("comp", "block")
                .query("blockid", id)
                .header("content-md5", md5.clone())
                .body(body.clone())
        };
        self.client
            .read("Put Block", req)
            .await
            .map(|_| ())
            .map_err(|f| f.into_backend("Put Block"))
    }

    /// Put Block List: `blob` becomes the blocks `ids`, in order; returns its ETag.
    async fn put_block_list(
        &self,
        blob: &str,
        ids: &[String],
        meta: &ObjectMeta,
        md5: Option<String>,
    ) -> Result<String, BackendError> {
        let mut xml = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
        for id in ids {
            xml += &format!("<Latest>{id}</Latest>");
        }
        xml += "</BlockList>";
        let xml = Spooled::from(bytes::Bytes::from(xml));
        let req = || {
            let r = Request::new(Method::PUT, &self.container, blob)
                .query("comp", "blocklist")
                .header("x-ms-blob-content-type", content_type(meta))
                .header("content-type", "application/xml")
                .body(xml.clone());
            match &md5 {
                Some(md5) => r.header("x-ms-blob-content-md5", md5.clone()),
                None => r,
            }
        };
        self.client
            .read("Put Block List", req)
            .await
            .map(|r| header(&r, "etag"))
            .map_err(|f| f.into_backend("Put Block List"))
    }

    /// Spools a body: one block's worth is committed with Put Blob; more streams into the
    /// blocks of a staging blob, one spooled block at a time.
    pub(super) async fn stage_body(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        mut body: ByteStream,
    ) -> Result<Staged, BackendError> {
        refuse_unstorable(key)?;
        meta::check_fits(&meta)?;
        let mut reader = PartReader {
            body: &mut body,
            held: None,
        };
        let mut size = 0u64;
        let first = self
            .spooler
            .spool_part(&mut reader, self.block_size, &mut size, None)
            .await?;
        let commit = random_id();
        let staged = |from, etag: String, size| Staged {
            body: StagedBody::Azure(Staging {
                from,
                commit,
                parts: Vec::new(),
            }),
            bucket: bucket.to_string(),
            key: key.to_string(),
            etag,
            size,
            version: None,
            meta: meta.clone(),
        };
        if first.ended {
            let etag = format!("\"{}\"", hex::encode(first.md5.finalize()));
            return Ok(staged(Source::Spooled(first.body), etag, size));
        }
        let name = format!("{}{STAGING}{}", self.prefix, random_id());
        let mut guard = StagingGuard {
            client: self.client.clone(),
            container: self.container.clone(),
            blob: Some(name.clone()),
        };
        let mut whole = first.md5.clone();
        let mut ids = Vec::new();
        let mut current = first;
        loop {
            let SpooledPart {
                body: block,
                md5,
                ended,
            } = current;
            if !block.is_empty() {
                let id = block_id(&format!("{:010}", ids.len()));
                self.put_block(&name, &id, &block, &md5.finalize()).await?;
                ids.push(id);
            }
            if ended {
                break;
            }
            // One block is spooled at a time: this one went before the next is read.
            drop(block);
            current = self
                .spooler
                .spool_part(&mut reader, self.block_size, &mut size, Some(&mut whole))
                .await?;
        }
        let digest = whole.finalize();
        let md5 = base64::engine::general_purpose::STANDARD.encode(digest);
        let source = self.put_block_list(&name, &ids, &meta, Some(md5)).await?;
        guard.blob = None;
        let etag = format!("\"{}\"", hex::encode(digest));
        let from = Source::Blob {
            name,
            upload: false,
            etag: source,
        };
        Ok(staged(from, etag, size))
    }

    /// UploadPart: the part is spooled in blocks (its MD5 names them, and is known only at
    /// its end), then each block goes to the upload's blob.
    pub(super) async fn put_part(
        &self,
        handle: &str,
        number: i32,
        body: ByteStream,
    ) -> Result<PartInfo, BackendError> {
        let (blocks, md5, size) = self.spooler.spool_blocks(body, self.block_size).await?;
        let blob = self.upload_blob(handle);
        for (i, (block, digest)) in blocks.iter().enumerate() {
            let id = block_id(&format!("{number:05}.{md5}.{i:05}"));
            self.put_block(&blob, &id, block, digest).await?;
        }
        Ok(PartInfo {
            number,
            etag: format!("\"{md5}\""),
            size,
            last_modified_ms: crate::wall_clock::now_ms(),
            checksum: None,
        })
    }

    /// The upload's blob made of the blocks of `parts`, in order, to be copied by the commit.
    pub(super) async fn assemble_parts(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        let blob = self.upload_blob(handle);
        // By name, the uncommitted block (listed last, and the one a Put Block List's
        // `Latest` takes) over a committed one of the same name.
        let have: std::collections::BTreeMap<String, u64> =
            self.block_names(&blob).await?.into_iter().collect();
        let mut ids = Vec::new();
        for part in parts.iter().filter(|p| p.size > 0) {
            let stem = format!("{:05}.{}.", part.number, part.etag.trim_matches('"'));
            // The part's blocks in order, up to its size. A part sent again (the same bytes,
            // so the same names) in blocks of another size (`block_size_bytes` changed across
            // a restart) leaves the first sending's later blocks beside the second's: the
            // last sending's blocks come first (it rewrote blocks 0..n) and add up to the
            // part's size exactly, so the stale ones after them are never taken.
            let (mut mine, mut sum) = (Vec::new(), 0u64);
            for (i, (name, size)) in have
                .range(stem.clone()..)
                .take_while(|(n, _)| n.starts_with(&stem))
                .enumerate()
            {
                if sum >= part.size || !name.ends_with(&format!(".{i:05}")) {
                    break;
                }
                mine.push(block_id(name));
                sum += size;
            }
            if mine.is_empty() || sum != part.size {
                return Err(BackendError::Invalid {
                    code: "InvalidPart",
                    message: format!(
                        "part {} with ETag {} is not stored whole for this upload; upload it again",
                        part.number, part.etag
                    ),
                });
            }
            ids.extend(mine);
        }
        let source = self.put_block_list(&blob, &ids, &meta, None).await?;
        let etags: Vec<&str> = parts.iter().map(|p| p.etag.as_str()).collect();
        Ok(Staged {
            body: StagedBody::Azure(Staging {
                from: Source::Blob {
                    name: blob,
                    upload: true,
                    etag: source,
                },
                commit: random_id(),
                parts: parts.iter().map(|p| (p.number as u32, p.size)).collect(),
            }),
            bucket: bucket.to_string(),
            key: key.to_string(),
            etag: multipart_etag(&etags),
            size: parts.iter().map(|p| p.size).sum(),
            version: None,
            meta,
        })
    }

    /// The names (decoded) and sizes of the blob's blocks, committed then uncommitted; none if
    /// the blob has none yet.
    async fn block_names(&self, blob: &str) -> Result<Vec<(String, u64)>, BackendError> {
        let req = || {
            Request::new(Method::GET, &self.container, blob)
                .query("comp", "blocklist")
                .query("blocklisttype", "all")
        };
        let text = match self.client.read("Get Block List", req).await {
            Ok(r) => r
                .text()
                .await
                .map_err(|e| BackendError::Failing(format!("Get Block List: {e}")))?,
            Err(AzFailure::NotFound) => return Ok(Vec::new()),
            Err(f) => return Err(f.into_backend("Get Block List")),
        };
        let mut names = Vec::new();
        let mut rest = text.as_str();
        while let Some(name) = client::between(rest, "<Name>", "</Name>") {
            rest = &rest[rest.find("</Name>").unwrap_or(rest.len()) + 7..];
            // Each <Name> is followed by its block's <Size>.
            let size = client::between(rest, "<Size>", "</Size>")
                .and_then(|s| s.trim().parse().ok())
                .ok_or_else(|| {
                    BackendError::Failing(format!(
                        "Get Block List of {blob}: a block without its size"
                    ))
                })?;
            if let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(name) {
                names.push((String::from_utf8_lossy(&bytes).to_string(), size));
            }
        }
        Ok(names)
    }
}

#[cfg(test)]
mod tests {
    use super::refuse_unstorable;

    /// Review findings: Azurite stores `al\x` as `al/x`, Azure drops a trailing dot (two keys,
    /// one blob), and a key holding U+FFFF made every listing beside it fail; such keys are
    /// refused before anything is sent.
    #[test]
    fn keys_azure_cannot_keep_are_refused() {
        for key in ["al\\x", "L/a\u{ffff}", "b\u{fffe}", "doc.", "a./b"] {
            assert!(refuse_unstorable(key).is_err(), "{key:?}");
        }
        for key in ["al/x", "a b%+&?#=~", "é😀", "a.b/c.d"] {
            assert!(refuse_unstorable(key).is_ok(), "{key:?}");
        }
    }
}
