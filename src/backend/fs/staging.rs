//! Staging: a body written into `<root>/.staging` with its MD5 and metadata trailer, fsynced,
//! invisible until its commit renames it into place. A stage dropped mid-body (the client hung
//! up) removes its file; files a crash left are swept when the backend opens. A small body's
//! fsync runs on after the gate has its file, beside the fence table's intent; the commit waits
//! for it before the rename ([`StagedSync`]).

use super::*;
use std::sync::{Arc, Condvar, Mutex};

pub(super) const STAGING: &str = ".staging";

/// Bodies up to this size are staged in one trip to a blocking thread.
pub(super) const SMALL_BODY: usize = 64 * 1024;

/// Removes the staging files older than `min_age`; returns how many.
pub(super) fn sweep_staging(
    staging: &Path,
    min_age: std::time::Duration,
) -> std::io::Result<usize> {
    let mut cleared = 0;
    for entry in std::fs::read_dir(staging)? {
        let entry = entry?;
        let age = entry
            .metadata()?
            .modified()
            .ok()
            .and_then(|m| m.elapsed().ok())
            .unwrap_or_default();
        if min_age.is_zero() || age >= min_age {
            match std::fs::remove_file(entry.path()) {
                Ok(()) => cleared += 1,
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(cleared)
}

/// What a multipart completion's object carries beyond its bytes: the ETag made of its parts'
/// and the parts' numbers and sizes (for GetObject `partNumber`).
pub(super) struct Assembly {
    pub(super) etag: String,
    pub(super) parts: Vec<(u32, u64)>,
}

/// A staged body's ETag (its MD5, unless it was assembled from parts) and the trailer its file
/// ends with.
pub(super) fn seal(
    key: &str,
    meta: &ObjectMeta,
    assembly: Option<Assembly>,
    md5: Md5,
    size: u64,
) -> (String, Vec<u8>) {
    let (etag, parts) = match assembly {
        Some(a) => (a.etag, a.parts),
        None => (format!("\"{}\"", hex::encode(md5.finalize())), Vec::new()),
    };
    // Sealed once the body has ended: a checksum it carried in its trailer is known now.
    let mut meta = meta.clone();
    meta.settle();
    let trailer = Trailer {
        key: key.to_string(),
        etag: etag.clone(),
        size,
        meta,
        parts,
    };
    (etag, trailer.encode())
}

/// A new staging file, open for reading too: the commit reads its trailer through this handle.
fn create_staging(path: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(path)
}

/// The gate's handle on a staged file: its path and open handle, and what it holds.
fn staged_at(
    (path, file, synced): (&Path, Arc<std::fs::File>, StagedSync),
    bucket: &str,
    key: &str,
    (etag, size, version): (String, u64, String),
    meta: ObjectMeta,
) -> Staged {
    Staged {
        body: StagedBody::File {
            path: path.to_string_lossy().into_owned(),
            file,
            synced,
        },
        bucket: bucket.to_string(),
        key: key.to_string(),
        etag,
        size,
        version: Some(version),
        meta,
    }
}

/// The fsync of a staged file, which may still be running when the gate has the file: the
/// gate checks under the lock and makes its intent durable meanwhile, and the commit waits
/// here before the rename, the one step that makes the body visible. Either order of the two
/// fsyncs leaves the same states after a crash (docs/design.md, "The staged body's fsync").
#[derive(Clone, Debug, Default)]
pub struct StagedSync(Arc<(Mutex<Option<SyncResult>>, Condvar)>);

/// How a staged file's fsync ended: its error, as text, if it failed.
type SyncResult = Result<(), String>;

impl StagedSync {
    /// A file fsynced already.
    pub(super) fn done() -> StagedSync {
        let synced = StagedSync::default();
        synced.finish(Ok(()));
        synced
    }

    pub(super) fn finish(&self, result: Result<(), String>) {
        let (ended, cond) = &*self.0;
        let mut ended = ended.lock().unwrap_or_else(|e| e.into_inner());
        if ended.is_none() {
            *ended = Some(result);
        }
        cond.notify_all();
    }

    /// Blocks until the fsync has ended (call it on a blocking thread); its failure fails the
    /// commit before anything is renamed.
    pub(super) fn wait(&self) -> Result<(), BackendError> {
        let (ended, cond) = &*self.0;
        let mut ended = ended.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &*ended {
                Some(Ok(())) => return Ok(()),
                Some(Err(e)) => {
                    return Err(BackendError::Failing(format!(
                        "the staged body could not be made durable ({e}); nothing was committed"
                    )))
                }
                None => ended = cond.wait(ended).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }
}

/// Ends a [`StagedSync`] however its task ends: with the fsync's result, or, if the task
/// never got that far, as failed, so that no commit waits for ever.
struct Syncing(StagedSync);

impl Drop for Syncing {
    fn drop(&mut self) {
        self.0
            .finish(Err("the fsync of the staged file never ran".into()));
    }
}

/// Removes a staging file whose staging did not complete, whether it failed or was dropped.
pub(super) struct StagingGuard(Option<PathBuf>);

impl Drop for StagingGuard {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            // An unlink is quick; doing it here, synchronously, needs no runtime (a dropped
            // future may be dropped while the runtime shuts down).
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(error = %e, file = %path.display(), "could not remove an incomplete staging file")
                }
            }
        }
    }
}

impl FsBackend {
    /// A fresh name in the staging directory.
    fn new_staging_file(&self) -> PathBuf {
        self.staging_dir()
            .join(format!("{:032x}.tmp", rand::random::<u128>()))
    }

    /// Streams a body into a staging file. A multipart completion's `assembly` gives its ETag
    /// (computed from its parts, not the body's MD5) and its parts' sizes.
    pub(super) async fn stage_body(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        mut body: ByteStream,
        assembly: Option<Assembly>,
    ) -> Result<Staged, BackendError> {
        let path = self.new_staging_file();
        // Most bodies are small: read whole, then written and measured in one trip to a
        // blocking thread (each trip is a thread hand-off, which dominated the CPU profile),
        // which fsyncs the file after handing it over. Larger ones stream through the file as
        // they arrive.
        // The chunks are kept as they came, never copied into one buffer.
        let mut md5 = Md5::new();
        let mut head: Vec<bytes::Bytes> = Vec::new();
        let mut size = 0u64;
        let ended = loop {
            if size >= SMALL_BODY as u64 {
                break false;
            }
            match body.next().await {
                Some(chunk) => {
                    let chunk = chunk?;
                    md5.update(&chunk);
                    size += chunk.len() as u64;
                    head.push(chunk);
                }
                None => break true,
            }
        };
        let (etag, size, version, file, synced) = if ended {
            let (etag, trailer) = seal(key, &meta, assembly, md5, size);
            let synced = StagedSync::default();
            let (handed, handover) = tokio::sync::oneshot::channel();
            let (at, syncing) = (path.clone(), Syncing(synced.clone()));
            // Not awaited: the task hands the written file over, then fsyncs it while the gate
            // goes on (the commit waits for that fsync before its rename).
            drop(tokio::task::spawn_blocking(move || {
                // Armed inside the task: if the request is dropped meanwhile (the client hung
                // up), the file goes with the guard in the answer no one takes.
                let guard = StagingGuard(Some(at.clone()));
                let written = (|| -> Result<_, BackendError> {
                    let mut file = create_staging(&at)?;
                    head.push(trailer.into());
                    writes::write_chunks(&mut file, &head)?;
                    Ok((staged_version_of(&file.metadata()?), Arc::new(file)))
                })();
                match written {
                    Ok((version, file)) => {
                        if handed.send(Ok((version, file.clone(), guard))).is_ok() {
                            syncing.0.finish(file.sync_all().map_err(|e| e.to_string()));
                        }
                    }
                    Err(e) => {
                        let _ = handed.send(Err(e));
                    }
                }
            }));
            let (version, file, mut guard) = handover
                .await
                .map_err(|_| BackendError::Failing("a file task failed".into()))??;
            // Staged: from here the gate owns the file (commit or discard).
            guard.0 = None;
            (etag, size, version, file, synced)
        } else {
            let (etag, size, version, file) = self
                .stream_to_staging(&path, key, &meta, head, md5, body, assembly)
                .await?;
            (etag, size, version, Arc::new(file), StagedSync::done())
        };
        Ok(staged_at(
            (&path, file, synced),
            bucket,
            key,
            (etag, size, version),
            meta,
        ))
    }

    /// A multipart completion's object: the chosen part files, each with the size it was
    /// uploaded with, joined into a staging file by the kernel (`std::io::copy` between two
    /// files is `copy_file_range`: a reflink on filesystems that have them, an in-kernel copy
    /// elsewhere), so their bytes never pass through this process. Nothing is read to hash:
    /// the ETag is made of the parts' digests, kept since each part was uploaded.
    pub(super) async fn stage_parts(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        files: Vec<(i32, PathBuf, u64)>,
        assembly: Assembly,
    ) -> Result<Staged, BackendError> {
        let path = self.new_staging_file();
        let (at, name, kept) = (path.clone(), key.to_string(), meta.clone());
        let (etag, size, version, file, mut guard) = blocking(move || {
            // Armed inside the task, as for a small body: an error below removes the file.
            let guard = StagingGuard(Some(at.clone()));
            let mut file = create_staging(&at)?;
            let mut size = 0u64;
            // A part gone (aborted, or sent again, while this completion copies) or changed
            // since its upload: the client's list no longer names these bytes, as S3 says of a
            // part it does not have. The message names the part, never a path.
            let gone = |number: i32, why: String| BackendError::Invalid {
                code: "InvalidPart",
                message: format!("part {number} {why}; upload it again, then complete"),
            };
            for (number, part, uploaded) in &files {
                let mut source = std::fs::File::open(part).map_err(|e| match e.kind() {
                    ErrorKind::NotFound => gone(*number, "is gone (aborted or sent again)".into()),
                    _ => e.into(),
                })?;
                let copied = std::io::copy(&mut source, &mut file)?;
                if copied != *uploaded {
                    return Err(gone(
                        *number,
                        format!("holds {copied} bytes on disk, but {uploaded} were uploaded"),
                    ));
                }
                size += copied;
            }
            let (etag, trailer) = seal(&name, &kept, Some(assembly), Md5::new(), size);
            std::io::Write::write_all(&mut file, &trailer)?;
            file.sync_all()?;
            Ok((
                etag,
                size,
                staged_version_of(&file.metadata()?),
                file,
                guard,
            ))
        })
        .await?;
        // Staged: from here the gate owns the file (commit or discard).
        guard.0 = None;
        Ok(staged_at(
            (&path, Arc::new(file), StagedSync::done()),
            bucket,
            key,
            (etag, size, version),
            meta,
        ))
    }

    /// A large body: `head` (read already) and the rest of `body`, streamed into the staging
    /// file at `path`. Returns its ETag, size, staged version and handle.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn stream_to_staging(
        &self,
        path: &Path,
        key: &str,
        meta: &ObjectMeta,
        head: Vec<bytes::Bytes>,
        md5: Md5,
        mut body: ByteStream,
        assembly: Option<Assembly>,
    ) -> Result<(String, u64, String, std::fs::File), BackendError> {
        // Armed before the file exists: a request dropped at any await below (the client hung
        // up mid-body) removes its staging file instead of leaving it until the next restart.
        let mut guard = StagingGuard(Some(path.to_path_buf()));
        let at = path.to_path_buf();
        let file = blocking(move || Ok(create_staging(&at)?)).await?;
        let written: Result<(String, u64, String, std::fs::File), BackendError> = async {
            let writes::Written {
                mut file,
                md5,
                size,
            } = writes::write_body(file, head, md5, &mut body).await?;
            let (etag, trailer) = seal(key, meta, assembly, md5, size);
            // The trailer, the fsync and the version in the last trip.
            let (version, file) = blocking(move || {
                std::io::Write::write_all(&mut file, &trailer)?;
                file.sync_all()?;
                Ok((staged_version_of(&file.metadata()?), file))
            })
            .await?;
            Ok((etag, size, version, file))
        }
        .await;
        if written.is_ok() {
            // Staged: from here the gate owns the file (commit or discard).
            guard.0 = None;
        }
        written
    }
}
