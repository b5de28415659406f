//! The `fs` backend: objects as files under a root directory, one subdirectory per bucket.
//!
//! A write streams into `<root>/.staging/<random>.tmp` (computing the MD5 ETag on the way),
//! appends the metadata trailer and fsyncs; the commit renames it into place and fsyncs the
//! directory. The "version" used for bypass detection is the file's inode, size, mtime and
//! ctime (`objfile::version_of`).

mod dirsync;
pub mod keymap;
mod listing;
mod objfile;
mod staging;
mod syscalls;
mod uploads;
mod writes;

use listing::*;
pub use staging::StagedSync;
use staging::*;
use syscalls::*;

use super::{
    match_parts, multipart_etag, same_version, Backend, BackendError, ByteStream, ListPage,
    ObjectInfo, ObjectMeta, ObjectPart, PartInfo, PartSpan, Staged, StagedBody,
};
use async_trait::async_trait;
use futures::StreamExt;
use md5::{Digest, Md5};
use objfile::{read_info, staged_version_of, version_of, Trailer};
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use tokio::io::AsyncReadExt;

pub struct FsBackend {
    root: PathBuf,
    /// Directory fsyncs shared by concurrent commits and deletes.
    dirsyncs: std::sync::Arc<dirsync::DirSyncs>,
}

impl FsBackend {
    /// Opens the root, creating it and the bucket directories, and clears staging files left by
    /// a crash (they were never committed, so no one can need them).
    pub fn open(root: &Path, buckets: &[&str]) -> std::io::Result<FsBackend> {
        Self::open_sweeping(root, buckets, std::time::Duration::ZERO)
    }

    /// [`FsBackend::open`], clearing only staging files older than `min_age`: at start-up no
    /// request is live and every file goes; a backend opened while serving (a bucket created
    /// through the S3 API) may share its root with one whose requests are staging right now.
    pub fn open_sweeping(
        root: &Path,
        buckets: &[&str],
        min_age: std::time::Duration,
    ) -> std::io::Result<FsBackend> {
        std::fs::create_dir_all(root)?;
        let staging = root.join(STAGING);
        if staging.exists() {
            let cleared = sweep_staging(&staging, min_age)?;
            if cleared > 0 {
                tracing::info!(
                    cleared,
                    "removed uncommitted staging files left by a crash or a cancelled request"
                );
            }
        } else {
            std::fs::create_dir(&staging)?;
        }
        for bucket in buckets {
            let dir = root.join(bucket);
            if !dir.exists() {
                std::fs::create_dir(&dir)?;
            }
        }
        fsync_dir(root)?;
        Ok(FsBackend {
            dirsyncs: Default::default(),
            root: root.to_path_buf(),
        })
    }

    /// Creates a bucket's directory if it is missing (a bucket created at run time).
    pub fn ensure_bucket(&self, bucket: &str) -> std::io::Result<()> {
        let dir = self.root.join(bucket);
        if !dir.exists() {
            std::fs::create_dir(&dir)?;
            fsync_dir(&self.root)?;
        }
        Ok(())
    }

    /// The file that holds `key` (which need not exist).
    pub fn object_file(&self, bucket: &str, key: &str) -> PathBuf {
        self.root.join(bucket).join(keymap::object_path(key))
    }

    pub fn staging_dir(&self) -> PathBuf {
        self.root.join(STAGING)
    }
}

impl FsBackend {}

#[async_trait]
impl Backend for FsBackend {
    async fn stage(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        body: ByteStream,
    ) -> Result<Staged, BackendError> {
        self.stage_body(bucket, key, meta, body, None).await
    }

    async fn commit(
        &self,
        staged: &Staged,
        expected: Option<&str>,
    ) -> Result<ObjectInfo, BackendError> {
        let target = self.object_file(&staged.bucket, &staged.key);
        let bucket_dir = self.root.join(&staged.bucket);
        let temp = PathBuf::from(staged.body.handle()?);
        let (carried, synced) = match &staged.body {
            StagedBody::File { file, synced, .. } => (Some(file.clone()), synced.clone()),
            _ => (None, StagedSync::done()),
        };
        let key = staged.key.clone();
        let expected = expected.map(str::to_string);
        let dirsyncs = self.dirsyncs.clone();
        blocking(move || {
            let parent = target
                .parent()
                .expect("object files live in a bucket directory");
            // The slow part (one fsync per new directory) comes before the version check, so
            // the window between the check and the rename stays as short as a syscall.
            create_dirs_durable(&bucket_dir, parent, &dirsyncs)?;
            // The body's own fsync ran beside the intent's (docs/design.md, "The staged body's
            // fsync"): nothing is renamed into place before it has ended well.
            synced.wait()?;
            // What is recorded is the identity of the file we wrote (read from its own handle,
            // which the rename keeps), never whatever sits at the path after the rename.
            let (file, mut info) = match carried {
                Some(file) => {
                    let info = read_info(&file, Some(&key))?;
                    (file, info)
                }
                None => open_info(&temp, &key)?
                    .map(|(file, info)| (std::sync::Arc::new(file), info))
                    .ok_or_else(|| BackendError::Failing("the staged file vanished".into()))?,
            };
            // The path must still hold the file written through the handle: whatever else was
            // put there is not renamed into place under this body's ETag.
            let ours = file.metadata()?;
            same_file(
                &temp,
                &ours,
                "the staged file was replaced or removed before its commit",
            )?;
            // Refused before the rename in a directory whose fsync failed: what a 503 says
            // did not happen does not happen.
            dirsyncs.check(parent)?;
            match &expected {
                // Create-only: atomic, a file that appears at the path meanwhile makes it fail.
                None => {
                    if !rename_noreplace(&temp, &target)? {
                        let found = current_version(&target)?;
                        return Err(BackendError::Conflict { expected, found });
                    }
                }
                Some(_) => {
                    let found = current_version(&target)?;
                    if !same_version(expected.as_deref(), found.as_deref()) {
                        return Err(BackendError::Conflict { expected, found });
                    }
                    std::fs::rename(&temp, &target)?;
                }
            }
            same_file(
                &target,
                &ours,
                "the file renamed into place is not the one staged",
            )?;
            dirsyncs.sync(parent, fsync_dir_shared)?;
            // The rename changed the file's ctime: record the version it has now, read from
            // our own handle, never from whatever sits at the path.
            info.version = version_of(&file.metadata()?);
            Ok(info)
        })
        .await
    }

    /// Only the s3 backend runs with a shared fence table, where deadlines matter.
    async fn commit_by(
        &self,
        staged: &Staged,
        expected: Option<&str>,
        _not_after: std::time::SystemTime,
    ) -> Result<ObjectInfo, BackendError> {
        self.commit(staged, expected).await
    }

    async fn delete_by(
        &self,
        bucket: &str,
        key: &str,
        expected: &str,
        _not_after: std::time::SystemTime,
    ) -> Result<(), BackendError> {
        self.delete(bucket, key, expected).await
    }

    /// The version is compared and the file renamed under the scope's lock.
    fn conditional_commit(&self, _staged: &Staged) -> bool {
        true
    }

    /// A commit or delete is a blocking task that has ended when the call returns.
    fn in_flight_bound(&self) -> Option<std::time::Duration> {
        None
    }

    /// A local disk: no clock but this machine's.
    async fn clock_offset(&self) -> Option<Result<(i64, i64), String>> {
        None
    }

    async fn release(&self, staged: Staged) {
        self.discard(staged).await
    }

    async fn check_ready(&self, bucket: &str) -> Result<(), BackendError> {
        let dir = self.root.join(bucket);
        let probe = self.staging_dir().join(format!(
            "ready-{}.tmp",
            hex::encode(rand::random::<[u8; 8]>())
        ));
        let dirsyncs = self.dirsyncs.clone();
        blocking(move || {
            if let Some((failed, error)) = dirsyncs.any_failure() {
                return Err(BackendError::Failing(format!(
                    "an fsync of {} failed ({error}); changes there fail until fencegate restarts: check the disk, then restart",
                    failed.display()
                )));
            }
            let fail = |what: &Path, e: std::io::Error| {
                BackendError::Failing(format!("{}: {e}", what.display()))
            };
            if !std::fs::metadata(&dir).map_err(|e| fail(&dir, e))?.is_dir() {
                return Err(BackendError::Failing(format!(
                    "{} is not a directory",
                    dir.display()
                )));
            }
            // A write where bodies are staged: the disk is mounted, writable, and not full.
            std::fs::write(&probe, b"ready").map_err(|e| fail(&probe, e))?;
            std::fs::remove_file(&probe).map_err(|e| fail(&probe, e))?;
            Ok(())
        })
        .await
    }

    async fn discard(&self, staged: Staged) {
        let Ok(file) = staged.body.handle() else {
            return;
        };
        match tokio::fs::remove_file(file).await {
            // Already gone: a commit that renamed it, or a crash clean-up.
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(error = %e, file, "could not remove a losing staged body"),
        }
    }

    async fn version(&self, bucket: &str, key: &str) -> Result<Option<String>, BackendError> {
        let path = self.object_file(bucket, key);
        blocking(move || Ok(current_version(&path)?)).await
    }

    async fn head(&self, bucket: &str, key: &str) -> Result<Option<ObjectInfo>, BackendError> {
        let path = self.object_file(bucket, key);
        let key = key.to_string();
        blocking(move || Ok(open_info(&path, &key)?.map(|(_, info)| info))).await
    }

    async fn get(
        &self,
        bucket: &str,
        key: &str,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        let path = self.object_file(bucket, key);
        let key = key.to_string();
        let Some((file, info)) = blocking(move || open_info(&path, &key)).await? else {
            return Ok(None);
        };
        // The open descriptor pins this version: a commit renaming over it does not change
        // what this reader sees.
        let reader = tokio::fs::File::from_std(file).take(info.size);
        let stream = tokio_util::io::ReaderStream::with_capacity(reader, 64 * 1024)
            .map(|r| r.map_err(|e| super::BodyError::Broken(e.to_string())));
        Ok(Some((info, Box::pin(stream))))
    }

    async fn get_range(
        &self,
        bucket: &str,
        key: &str,
        start: u64,
        end: u64,
    ) -> Result<Option<(ObjectInfo, ByteStream)>, BackendError> {
        use std::io::{Seek, SeekFrom};
        let path = self.object_file(bucket, key);
        let key = key.to_string();
        let opened = blocking(move || match open_info(&path, &key)? {
            Some((mut file, info)) => {
                file.seek(SeekFrom::Start(start.min(info.size)))?;
                Ok(Some((file, info)))
            }
            None => Ok(None),
        })
        .await?;
        let Some((file, info)) = opened else {
            return Ok(None);
        };
        let len = (end.min(info.size.saturating_sub(1)) + 1).saturating_sub(start);
        let reader = tokio::fs::File::from_std(file).take(len);
        let stream = tokio_util::io::ReaderStream::with_capacity(reader, 64 * 1024)
            .map(|r| r.map_err(|e| super::BodyError::Broken(e.to_string())));
        Ok(Some((info, Box::pin(stream))))
    }

    /// One open of the file answers for one version: its trailer gives the parts, and the
    /// part is read from that same descriptor.
    async fn get_part(
        &self,
        bucket: &str,
        key: &str,
        number: u32,
        body: bool,
    ) -> Result<Option<ObjectPart>, BackendError> {
        use std::io::{Seek, SeekFrom};
        let path = self.object_file(bucket, key);
        let key = key.to_string();
        let opened = blocking(move || {
            let Some((mut file, info)) = open_info(&path, &key)? else {
                return Ok(None);
            };
            let span = PartSpan::of(&info.parts, info.size, number)?;
            file.seek(SeekFrom::Start(span.offset))?;
            Ok(Some((file, info, span)))
        })
        .await?;
        let Some((file, info, span)) = opened else {
            return Ok(None);
        };
        let body = body.then(|| {
            let reader = tokio::fs::File::from_std(file).take(span.len);
            let stream = tokio_util::io::ReaderStream::with_capacity(reader, 64 * 1024)
                .map(|r| r.map_err(|e| super::BodyError::Broken(e.to_string())));
            Box::pin(stream) as ByteStream
        });
        Ok(Some(ObjectPart { info, span, body }))
    }

    async fn create_upload(
        &self,
        _bucket: &str,
        _key: &str,
        _meta: &ObjectMeta,
    ) -> Result<String, BackendError> {
        uploads::create(&self.root).await
    }

    async fn upload_part(
        &self,
        _bucket: &str,
        _key: &str,
        handle: &str,
        number: i32,
        body: ByteStream,
        _size: Option<u64>,
    ) -> Result<PartInfo, BackendError> {
        uploads::put_part(&self.root, handle, number, body).await
    }

    async fn assemble(
        &self,
        bucket: &str,
        key: &str,
        handle: &str,
        parts: &[PartInfo],
        meta: ObjectMeta,
    ) -> Result<Staged, BackendError> {
        // The files are the truth here: a part whose file is not there with that ETag fails.
        let on_disk = uploads::parts(&self.root, handle).await?;
        let infos: Vec<PartInfo> = on_disk.iter().map(|(p, _)| p.clone()).collect();
        let wanted: Vec<(i32, String)> = parts.iter().map(|p| (p.number, p.etag.clone())).collect();
        let chosen = match_parts(&wanted, &infos)?;
        let etags: Vec<&str> = chosen.iter().map(|p| p.etag.as_str()).collect();
        let etag = multipart_etag(&etags);
        // Each part's size as the gate recorded it when the part was uploaded, not as its file
        // is now: a file changed since is refused, not committed.
        let files = chosen
            .iter()
            .filter_map(|p| on_disk.iter().find(|(d, _)| d.number == p.number))
            .map(|(part, path)| {
                let uploaded = parts.iter().find(|p| p.number == part.number);
                (
                    part.number,
                    path.clone(),
                    uploaded.map_or(part.size, |p| p.size),
                )
            })
            .collect();
        let assembly = Assembly {
            etag,
            parts: chosen.iter().map(|p| (p.number as u32, p.size)).collect(),
        };
        self.stage_parts(bucket, key, meta, files, assembly).await
    }

    async fn finish_upload(
        &self,
        _bucket: &str,
        _key: &str,
        handle: &str,
    ) -> Result<(), BackendError> {
        uploads::remove(&self.root, handle).await
    }

    async fn delete(&self, bucket: &str, key: &str, expected: &str) -> Result<(), BackendError> {
        let path = self.object_file(bucket, key);
        let expected = expected.to_string();
        let dirsyncs = self.dirsyncs.clone();
        blocking(move || {
            let found = current_version(&path)?;
            if !same_version(Some(&expected), found.as_deref()) {
                return Err(BackendError::Conflict {
                    expected: Some(expected),
                    found,
                });
            }
            let parent = path
                .parent()
                .expect("object files live in a bucket directory");
            dirsyncs.check(parent)?;
            std::fs::remove_file(&path)?;
            dirsyncs.sync(parent, fsync_dir_shared)?;
            Ok(())
        })
        .await
    }

    async fn list(
        &self,
        bucket: &str,
        prefix: &str,
        start_after: Option<&str>,
        max: usize,
    ) -> Result<ListPage, BackendError> {
        let dir = self.root.join(bucket);
        let prefix = prefix.to_string();
        let start_after = start_after.map(str::to_string);
        blocking(move || list_dir(&dir, &prefix, start_after.as_deref(), max)).await
    }
}

#[cfg(test)]
mod tests;
