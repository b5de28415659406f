//! Bodies larger than one block, and multipart uploads, as staging objects of one block each
//! that only fencegate writes, composed onto the object by the commit. A large body streams
//! into `<prefix>.fencegate-probe/staging/<id>/<index>` one spooled block at a time; a
//! multipart upload's parts go to `.../uploads/<upload>/<part>.<part's MD5>.<count>-<index>`,
//! so the completion finds the pieces of exactly the parts it was given, and one whole set of
//! them (a part sent again with another block size leaves a set of another count beside it). Each piece carries its
//! Content-MD5, so the service refuses other bytes, and is pinned by its generation when
//! composed, so a piece written again later cannot change what a commit takes.

use super::client::Request;
use super::*;
use crate::backend::multipart_etag;
use crate::backend::spool::{PartReader, SpooledPart};
use base64::Engine;
use md5::Digest;

/// The most sources one compose takes.
pub(super) const COMPOSE_MAX: usize = 32;

/// The Content-Type an object is stored with: AWS's `binary/octet-stream` for an object
/// written without one, as the s3 backend stores it.
pub(super) fn content_type(meta: &ObjectMeta) -> String {
    meta.content_type
        .clone()
        .unwrap_or_else(|| "binary/octet-stream".into())
}

/// Refuses an object name GCS would not keep as given (cloud.google.com, "Object naming
/// requirements"): more than 1024 bytes, a carriage return or line feed, `.` or `..` alone,
/// or under `.well-known/acme-challenge/`.
pub(super) fn refuse_unstorable(name: &str) -> Result<(), BackendError> {
    let problem = if name.len() > 1024 {
        Some("is longer than the 1024 bytes GCS allows an object name (the bucket's backend_prefix included)".to_string())
    } else if name.contains(['\r', '\n']) {
        Some("holds a carriage return or line feed, which GCS refuses in an object name".into())
    } else if name == "." || name == ".." {
        Some("is `.` or `..`, which GCS refuses as an object name".into())
    } else if name.starts_with(".well-known/acme-challenge/") {
        Some("starts with .well-known/acme-challenge/, which GCS refuses".into())
    } else {
        None
    };
    match problem {
        Some(p) => Err(BackendError::Invalid {
            code: "InvalidArgument",
            message: format!("the key {p}: choose another key"),
        }),
        None => Ok(()),
    }
}

/// Deletes the staging pieces of a body that did not finish staging (the request was dropped).
struct PiecesGuard {
    client: Arc<GcsClient>,
    bucket: String,
    names: Vec<String>,
}

impl Drop for PiecesGuard {
    fn drop(&mut self) {
        if self.names.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (client, bucket) = (self.client.clone(), std::mem::take(&mut self.bucket));
        let names = std::mem::take(&mut self.names);
        runtime.spawn(async move {
            for name in names {
                let req = Request::xml(Method::DELETE, &bucket, &name);
                match client.send("DELETE Object", req).await {
                    Ok(_) | Err(GcsFailure::NotFound) => {}
                    Err(f) => {
                        let e = f.into_backend("DELETE Object");
                        tracing::warn!(object = name, error = %e, "could not delete a staging piece of a cancelled request; the start-up sweep (abandoned_upload_secs) or a lifecycle rule on .fencegate-probe/ collects it")
                    }
                }
            }
        });
    }
}

impl GcsBackend {
    pub(super) fn upload_prefix(&self, handle: &str) -> String {
        format!("{}{UPLOADS}{handle}/", self.prefix)
    }

    /// PUT of one staging piece with its Content-MD5; returns its generation. The name is
    /// fencegate's alone, so the upload is tried again after a fault that may pass.
    async fn put_piece(
        &self,
        name: &str,
        body: &Spooled,
        md5: &[u8],
    ) -> Result<String, BackendError> {
        let md5 = base64::engine::general_purpose::STANDARD.encode(md5);
        let req = || {
            Request::xml(Method::PUT, &self.bucket, name)
                .header("content-md5", md5.clone())
                .header("content-type", "application/octet-stream")
                .body(body.clone())
        };
        let r = self
            .client
            .read("PUT Object", req)
            .await
            .map_err(|f| f.into_backend("PUT Object"))?;
        generation_of(&r, "PUT Object")
    }

    /// Compose of `sources` (each pinned to its generation) onto the staging object `name`,
    /// for a commit of more than [`COMPOSE_MAX`] pieces; returns its generation.
    async fn compose_staging(
        &self,
        name: &str,
        sources: &[(String, String)],
    ) -> Result<String, BackendError> {
        let body = compose_request(sources);
        let req = || {
            Request::xml(Method::PUT, &self.bucket, name)
                .query("compose", "")
                .header("content-type", "application/octet-stream")
                .body(body.clone())
        };
        let r = self
            .client
            .read("Compose", req)
            .await
            .map_err(|f| f.into_backend("Compose"))?;
        generation_of(&r, "Compose")
    }

    /// `pieces` brought down to at most [`COMPOSE_MAX`] sources, by composing runs of them
    /// into staging objects (returned second, for deletion once committed).
    pub(super) async fn fold_pieces(
        &self,
        pieces: &[(String, String)],
    ) -> Result<(Vec<(String, String)>, Vec<String>), BackendError> {
        let mut level = pieces.to_vec();
        let mut made = Vec::new();
        let id = random_id();
        let mut depth = 0;
        while level.len() > COMPOSE_MAX {
            let mut next = Vec::new();
            for (i, run) in level.chunks(COMPOSE_MAX).enumerate() {
                let name = format!("{}{STAGING}{id}/c{depth}.{i:05}", self.prefix);
                made.push(name.clone());
                let generation = self.compose_staging(&name, run).await?;
                next.push((name, generation));
            }
            level = next;
            depth += 1;
        }
        Ok((level, made))
    }

    /// Spools a body: one block's worth is committed with one PUT; more streams into staging
    /// pieces, one spooled block at a time.
    pub(super) async fn stage_body(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        mut body: ByteStream,
    ) -> Result<Staged, BackendError> {
        refuse_unstorable(&self.object(key))?;
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
            body: StagedBody::Gcs(Staging {
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
        let id = random_id();
        let mut guard = PiecesGuard {
            client: self.client.clone(),
            bucket: self.bucket.clone(),
            names: Vec::new(),
        };
        let mut whole = first.md5.clone();
        let mut pieces = Vec::new();
        let mut current = first;
        loop {
            let SpooledPart {
                body: block,
                md5,
                ended,
            } = current;
            if !block.is_empty() {
                let name = format!("{}{STAGING}{id}/{:05}", self.prefix, pieces.len());
                guard.names.push(name.clone());
                let generation = self.put_piece(&name, &block, &md5.finalize()).await?;
                pieces.push((name, generation));
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
        guard.names.clear();
        let etag = format!("\"{}\"", hex::encode(whole.finalize()));
        let from = Source::Pieces {
            pieces,
            owned: true,
        };
        Ok(staged(from, etag, size))
    }

    /// UploadPart: the part is spooled in blocks (its MD5 names them, and is known only at its
    /// end), then each block goes up as a piece of the upload.
    pub(super) async fn put_part(
        &self,
        handle: &str,
        number: i32,
        body: ByteStream,
    ) -> Result<PartInfo, BackendError> {
        let (blocks, md5, size) = self.spooler.spool_blocks(body, self.block_size).await?;
        let prefix = self.upload_prefix(handle);
        let count = blocks.len();
        for (i, (block, digest)) in blocks.iter().enumerate() {
            let name = format!("{prefix}{number:05}.{md5}.{count:05}-{i:05}");
            self.put_piece(&name, block, digest).await?;
        }
        Ok(PartInfo {
            number,
            etag: format!("\"{md5}\""),
            size,
            last_modified_ms: crate::wall_clock::now_ms(),
            checksum: None,
        })
    }

    /// The pieces of `parts`, in order and at the generations listed now, for the commit to
    /// compose.
    pub(super) async fn assemble_parts(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        let prefix = self.upload_prefix(handle);
        let mut have = Vec::new();
        let mut after = None;
        loop {
            let page = self.list_objects(&prefix, after.as_deref(), 1000).await?;
            have.extend(page.objects.into_iter().map(|o| (o.key, o.version)));
            match page.next_start_after {
                Some(next) => after = Some(next),
                None => break,
            }
        }
        let mut pieces = Vec::new();
        for part in parts.iter().filter(|p| p.size > 0) {
            let stem = format!(
                "{prefix}{:05}.{}.",
                part.number,
                part.etag.trim_matches('"')
            );
            let Some(set) = whole_set(&have, &stem) else {
                return Err(BackendError::Invalid {
                    code: "InvalidPart",
                    message: format!(
                        "part {} with ETag {} is not stored whole for this upload; upload it again",
                        part.number, part.etag
                    ),
                });
            };
            pieces.extend(set);
        }
        let from = match pieces.is_empty() {
            // Compose needs a source: an upload of empty parts is an empty body.
            true => Source::Spooled(Spooled::from(bytes::Bytes::new())),
            false => Source::Pieces {
                pieces,
                owned: false,
            },
        };
        let etags: Vec<&str> = parts.iter().map(|p| p.etag.as_str()).collect();
        Ok(Staged {
            body: StagedBody::Gcs(Staging {
                from,
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
}

/// A stored piece: its name and generation.
type Piece = (String, String);

/// The pieces named `<stem><count>-<index>` of one set whose every index below its count is
/// stored, in order. Two whole sets of one part (sent twice with different block sizes) hold
/// the same bytes, as the part's MD5 in the stem says, so either will do.
fn whole_set(have: &[Piece], stem: &str) -> Option<Vec<Piece>> {
    let mut sets: std::collections::BTreeMap<usize, Vec<(usize, &Piece)>> = Default::default();
    for piece in have {
        let Some(rest) = piece.0.strip_prefix(stem) else {
            continue;
        };
        let Some((count, index)) = rest.split_once('-') else {
            continue;
        };
        if let (Ok(count), Ok(index)) = (count.parse::<usize>(), index.parse::<usize>()) {
            sets.entry(count).or_default().push((index, piece));
        }
    }
    sets.into_iter().find_map(|(count, mut pieces)| {
        pieces.sort();
        pieces.dedup_by_key(|(i, _)| *i);
        let whole = pieces.len() == count && pieces.iter().enumerate().all(|(i, (n, _))| i == *n);
        whole.then(|| pieces.into_iter().map(|(_, p)| p.clone()).collect())
    })
}

/// The XML API's compose body: each source by name, pinned to its generation.
pub(super) fn compose_request(sources: &[(String, String)]) -> Spooled {
    let mut xml = String::from("<ComposeRequest>");
    for (name, generation) in sources {
        xml += &format!(
            "<Component><Name>{}</Name><Generation>{generation}</Generation></Component>",
            quick_xml::escape::escape(name.as_str())
        );
    }
    xml += "</ComposeRequest>";
    Spooled::from(bytes::Bytes::from(xml))
}

/// The generation an answer names (`x-goog-generation`).
pub(super) fn generation_of(r: &reqwest::Response, op: &str) -> Result<String, BackendError> {
    let generation = header(r, "x-goog-generation");
    match generation.is_empty() {
        true => Err(BackendError::Failing(format!(
            "{op}: the answer names no generation (x-goog-generation); is the endpoint GCS's XML API?"
        ))),
        false => Ok(generation),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_gcs_cannot_keep_are_refused() {
        for name in ["a\rb", "a\nb", ".", "..", ".well-known/acme-challenge/x"] {
            assert!(refuse_unstorable(name).is_err(), "{name:?}");
        }
        assert!(refuse_unstorable(&"a".repeat(1025)).is_err());
        for name in ["a/b", "a b%+&?#=~", "é😀", "a./b", "..a", &"a".repeat(1024)] {
            assert!(refuse_unstorable(name).is_ok(), "{name:?}");
        }
    }

    /// Review finding: a part sent again after a restart with another block size rewrote only
    /// its first piece, and the completion composed the new set and the old one's rest. Only
    /// one whole set is taken.
    #[test]
    fn one_whole_set_of_a_parts_pieces_is_taken() {
        let have: Vec<(String, String)> = [
            ("u/00001.ab.00003-00000", "1"),
            ("u/00001.ab.00003-00001", "2"),
            ("u/00001.ab.00003-00002", "3"),
            ("u/00001.ab.00001-00000", "4"),
            ("u/00002.cd.00002-00000", "5"),
        ]
        .iter()
        .map(|(n, g)| (n.to_string(), g.to_string()))
        .collect();
        let set = whole_set(&have, "u/00001.ab.").unwrap();
        assert_eq!(
            set,
            vec![("u/00001.ab.00001-00000".to_string(), "4".to_string())]
        );
        assert_eq!(
            whole_set(&have, "u/00002.cd."),
            None,
            "a set missing a piece"
        );
        assert_eq!(whole_set(&have[..3], "u/00001.ab.").unwrap().len(), 3);
    }

    #[test]
    fn a_compose_body_names_each_source_at_its_generation() {
        let body = compose_request(&[("p/a&b".into(), "7".into()), ("p/c".into(), "9".into())]);
        let text = String::from_utf8(body.bytes().unwrap().to_vec()).unwrap();
        assert_eq!(text, "<ComposeRequest><Component><Name>p/a&amp;b</Name><Generation>7</Generation></Component><Component><Name>p/c</Name><Generation>9</Generation></Component></ComposeRequest>");
    }
}
