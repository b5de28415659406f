//! The `fs` backend: objects as files under a root directory, one subdirectory per bucket.
//!
//! A write streams into `<root>/.staging/<random>.tmp` (computing the MD5 ETag on the way),
//! appends the metadata trailer and fsyncs; the commit renames it into place and fsyncs the
//! directory. The "version" used for bypass detection is the file's inode, size, mtime and
//! ctime (`objfile::version_of`).

mod dirsync;
pub mod keymap;
mod objfile;
mod uploads;

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
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const STAGING: &str = ".staging";
/// Bodies up to this size are staged in one trip to a blocking thread.
const SMALL_BODY: usize = 64 * 1024;

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

/// Removes the staging files older than `min_age`; returns how many.
fn sweep_staging(staging: &Path, min_age: std::time::Duration) -> std::io::Result<usize> {
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

fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(test)]
    tests::FSYNCED.with(|f| f.borrow_mut().push(dir.to_path_buf()));
    std::fs::File::open(dir)?.sync_all()
}

/// The file's current version, `None` if there is no file (or a file where a directory is).
/// Renames `from` to `to` unless `to` exists (renameat2 with RENAME_NOREPLACE, atomic);
/// false if it exists. On a filesystem without the flag, a check and a plain rename.
fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<bool> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|e| std::io::Error::new(ErrorKind::InvalidInput, e))
    };
    let (cf, ct) = (c(from)?, c(to)?);
    // SAFETY: both are NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            cf.as_ptr(),
            libc::AT_FDCWD,
            ct.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(true);
    }
    let err = std::io::Error::last_os_error();
    match err.raw_os_error() {
        Some(libc::EEXIST) => Ok(false),
        Some(libc::EINVAL | libc::ENOSYS) => {
            if current_version(to)?.is_some() {
                return Ok(false);
            }
            std::fs::rename(from, to)?;
            Ok(true)
        }
        _ => Err(err),
    }
}

fn current_version(path: &Path) -> std::io::Result<Option<String>> {
    match std::fs::metadata(path) {
        Ok(md) if md.is_file() => Ok(Some(version_of(&md))),
        Ok(_) => Ok(None),
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates the missing directories between `base` and `dir`, fsyncing each one's parent so
/// the entry survives a power loss.
///
/// The parent is fsynced when the directory already exists too: another writer may have
/// created it a moment ago and not finished its own fsync, and a commit acknowledged on top of
/// that entry would be lost with it. An fsync of a directory with nothing dirty is cheap.
fn create_dirs_durable(
    base: &Path,
    dir: &Path,
    dirsyncs: &dirsync::DirSyncs,
) -> std::io::Result<()> {
    let rel = dir.strip_prefix(base).unwrap_or(Path::new(""));
    let mut at = base.to_path_buf();
    for part in rel.components() {
        let next = at.join(part);
        // A directory whose fsync failed takes no new entry, and a failed fsync here fails
        // the directory as the commit's own would.
        dirsyncs.check(&at)?;
        match std::fs::create_dir(&next) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        dirsyncs.sync(&at, fsync_dir)?;
        at = next;
    }
    Ok(())
}

/// What a multipart completion's object carries beyond its bytes: the ETag made of its parts'
/// and the parts' numbers and sizes (for GetObject `partNumber`).
struct Assembly {
    etag: String,
    parts: Vec<(u32, u64)>,
}

/// A staged body's ETag (its MD5, unless it was assembled from parts) and the trailer its file
/// ends with.
fn seal(
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
    let trailer = Trailer {
        key: key.to_string(),
        etag: etag.clone(),
        size,
        meta: meta.clone(),
        parts,
    };
    (etag, trailer.encode())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BackendError> + Send + 'static,
) -> Result<T, BackendError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BackendError::Failing(format!("a file task failed: {e}")))?
}

fn open_info(path: &Path, key: &str) -> Result<Option<(std::fs::File, ObjectInfo)>, BackendError> {
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let info = read_info(&mut file, Some(key))?;
    Ok(Some((file, info)))
}

impl FsBackend {
    /// Streams a body into a staging file. A multipart completion's `assembly` gives its ETag
    /// (computed from its parts, not the body's MD5) and its parts' sizes.
    async fn stage_body(
        &self,
        bucket: &str,
        key: &str,
        meta: ObjectMeta,
        mut body: ByteStream,
        assembly: Option<Assembly>,
    ) -> Result<Staged, BackendError> {
        let name = format!("{:032x}.tmp", rand::random::<u128>());
        let path = self.staging_dir().join(name);
        // Most bodies are small: read whole, then written, fsynced and measured in one trip
        // to a blocking thread (each trip is a thread hand-off, which dominated the CPU
        // profile). Larger ones stream through the file as they arrive.
        let mut md5 = Md5::new();
        let mut head = bytes::BytesMut::new();
        let ended = loop {
            if head.len() >= SMALL_BODY {
                break false;
            }
            match body.next().await {
                Some(chunk) => {
                    let chunk = chunk?;
                    md5.update(&chunk);
                    head.extend_from_slice(&chunk);
                }
                None => break true,
            }
        };
        let (etag, size, version) = if ended {
            let size = head.len() as u64;
            let (etag, trailer) = seal(key, &meta, assembly, md5, size);
            let at = path.clone();
            let (version, mut guard) = blocking(move || {
                // Armed inside the task: if the request is dropped meanwhile (the client hung
                // up), the task's answer is dropped with the guard still armed and the file goes.
                let guard = StagingGuard(Some(at.clone()));
                let mut file = std::fs::File::create(&at)?;
                std::io::Write::write_all(&mut file, &head)?;
                std::io::Write::write_all(&mut file, &trailer)?;
                file.sync_all()?;
                Ok((staged_version_of(&file.metadata()?), guard))
            })
            .await?;
            // Staged: from here the gate owns the file (commit or discard).
            guard.0 = None;
            (etag, size, version)
        } else {
            self.stream_to_staging(&path, key, &meta, head.freeze(), md5, body, assembly)
                .await?
        };
        Ok(Staged {
            body: StagedBody::Handle(path.to_string_lossy().into_owned()),
            bucket: bucket.to_string(),
            key: key.to_string(),
            etag,
            size,
            version: Some(version),
            meta,
        })
    }

    /// A large body: `head` (read already) and the rest of `body`, streamed into the staging
    /// file at `path`. Returns its ETag, size and staged version.
    #[allow(clippy::too_many_arguments)]
    async fn stream_to_staging(
        &self,
        path: &Path,
        key: &str,
        meta: &ObjectMeta,
        head: bytes::Bytes,
        mut md5: Md5,
        mut body: ByteStream,
        assembly: Option<Assembly>,
    ) -> Result<(String, u64, String), BackendError> {
        // Armed before the file exists: a request dropped at any await below (the client hung
        // up mid-body) removes its staging file instead of leaving it until the next restart.
        let mut guard = StagingGuard(Some(path.to_path_buf()));
        let mut file = tokio::fs::File::create(path).await?;
        let written: Result<(String, u64, String), BackendError> = async {
            let mut size = head.len() as u64;
            file.write_all(&head).await?;
            while let Some(chunk) = body.next().await {
                let chunk = chunk?;
                md5.update(&chunk);
                size += chunk.len() as u64;
                file.write_all(&chunk).await?;
            }
            let (etag, trailer) = seal(key, meta, assembly, md5, size);
            file.write_all(&trailer).await?;
            file.flush().await?;
            file.sync_all().await?;
            let version = staged_version_of(&file.metadata().await?);
            Ok((etag, size, version))
        }
        .await;
        drop(file);
        if written.is_ok() {
            // Staged: from here the gate owns the file (commit or discard).
            guard.0 = None;
        }
        written
    }
}

/// Removes a staging file whose staging did not complete, whether it failed or was dropped.
struct StagingGuard(Option<PathBuf>);

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
            // What is recorded is the identity of the file we wrote (read from its own handle,
            // which the rename keeps), never whatever sits at the path after the rename.
            let (file, mut info) = open_info(&temp, &key)?
                .ok_or_else(|| BackendError::Failing("the staged file vanished".into()))?;
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
            dirsyncs.sync(parent, fsync_dir)?;
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
        let files = chosen
            .iter()
            .filter_map(|p| on_disk.iter().find(|(d, _)| d.number == p.number))
            .map(|(_, path)| path.clone())
            .collect();
        let assembly = Assembly {
            etag,
            parts: chosen.iter().map(|p| (p.number as u32, p.size)).collect(),
        };
        self.stage_body(bucket, key, meta, uploads::concat(files), Some(assembly))
            .await
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
            dirsyncs.sync(parent, fsync_dir)?;
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

fn list_dir(
    bucket_dir: &Path,
    prefix: &str,
    start_after: Option<&str>,
    max: usize,
) -> Result<ListPage, BackendError> {
    // (key, file) pairs; names fencegate did not make are ignored.
    let mut found: Vec<(String, PathBuf)> = Vec::new();
    walk(bucket_dir, "", prefix, &mut found)?;
    let long = bucket_dir.join(keymap::LONG_DIR);
    if long.is_dir() {
        for entry in std::fs::read_dir(&long)? {
            let path = entry?.path();
            let mut file = std::fs::File::open(&path)?;
            if let Ok(info) = read_info(&mut file, None) {
                if info.key.starts_with(prefix) {
                    found.push((info.key, path));
                }
            }
        }
    }
    found.retain(|(k, _)| start_after.is_none_or(|s| k.as_str() > s));
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let truncated = found.len() > max;
    found.truncate(max);
    let mut page = ListPage::default();
    for (key, path) in found {
        // A file deleted since the walk is simply left out.
        if let Some((_, info)) = open_info(&path, &key)? {
            page.objects.push(info);
        }
    }
    if truncated {
        page.next_start_after = page.objects.last().map(|o| o.key.clone());
    }
    Ok(page)
}

fn walk(
    dir: &Path,
    key_prefix: &str,
    want: &str,
    out: &mut Vec<(String, PathBuf)>,
) -> Result<(), BackendError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e.into()),
    };
    for entry in entries {
        let entry = entry?;
        let Some(name) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Some((segment, is_dir)) = keymap::decode_name(&name) else {
            continue;
        };
        let key = format!("{key_prefix}{segment}");
        if is_dir {
            let sub = format!("{key}/");
            // Descend only where keys matching the prefix can be.
            if sub.starts_with(want) || want.starts_with(&sub) {
                walk(&entry.path(), &sub, want, out)?;
            }
        } else if key.starts_with(want) {
            out.push((key, entry.path()));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    thread_local! {
        /// Directories fsynced on this thread, for tests that pin when fsyncs happen.
        pub(super) static FSYNCED: std::cell::RefCell<Vec<PathBuf>> = const { std::cell::RefCell::new(Vec::new()) };
    }

    fn fsynced() -> Vec<PathBuf> {
        FSYNCED.with(|f| std::mem::take(&mut *f.borrow_mut()))
    }

    fn staging_files(fs: &FsBackend) -> Vec<PathBuf> {
        std::fs::read_dir(fs.staging_dir())
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect()
    }

    #[tokio::test]
    async fn a_stage_dropped_mid_body_leaves_no_staging_file() {
        let dir = tempfile::tempdir().unwrap();
        let fs = std::sync::Arc::new(FsBackend::open(dir.path(), &["b"]).unwrap());
        // A small body is read whole before any file exists: stalled, it leaves nothing.
        let small: ByteStream = Box::pin(
            futures::stream::iter([Ok(Bytes::from_static(b"first chunk"))])
                .chain(futures::stream::pending()),
        );
        let stager = fs.clone();
        let task =
            tokio::spawn(async move { stager.stage("b", "k", ObjectMeta::default(), small).await });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(staging_files(&fs), Vec::<PathBuf>::new());
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        // A large body's first chunk arrives (it streams to a file), then the client stalls.
        let stalled: ByteStream = Box::pin(
            futures::stream::iter([Ok(Bytes::from(vec![7u8; SMALL_BODY + 1]))])
                .chain(futures::stream::pending()),
        );
        let stager = fs.clone();
        let task =
            tokio::spawn(
                async move { stager.stage("b", "k", ObjectMeta::default(), stalled).await },
            );
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while staging_files(&fs).is_empty() {
            assert!(std::time::Instant::now() < deadline, "staging never began");
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        // The client hangs up: the request's future is dropped mid-body.
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(staging_files(&fs), Vec::<PathBuf>::new());
        // A body that fails mid-way leaves nothing either.
        let broken: ByteStream = Box::pin(futures::stream::iter([
            Ok(Bytes::from_static(b"part")),
            Err(crate::backend::BodyError::Broken("reset".into())),
        ]));
        assert!(fs
            .stage("b", "k", ObjectMeta::default(), broken)
            .await
            .is_err());
        assert_eq!(staging_files(&fs), Vec::<PathBuf>::new());
        // A completed stage is the gate's to commit or discard: it stays.
        let staged = fs
            .stage("b", "k", ObjectMeta::default(), body(b"v"))
            .await
            .unwrap();
        assert_eq!(staging_files(&fs).len(), 1);
        fs.discard(staged).await;
    }

    #[test]
    fn opening_sweeps_staging_files_by_age() {
        let dir = tempfile::tempdir().unwrap();
        FsBackend::open(dir.path(), &["b"]).unwrap();
        let stale = dir.path().join(STAGING).join("left-by-a-crash.tmp");
        std::fs::write(&stale, b"x").unwrap();
        // Opened while serving, only old files go: this one may belong to a live request.
        FsBackend::open_sweeping(dir.path(), &["b"], std::time::Duration::from_secs(600)).unwrap();
        assert!(stale.exists());
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&stale)
            .unwrap()
            .set_modified(old)
            .unwrap();
        FsBackend::open_sweeping(dir.path(), &["b"], std::time::Duration::from_secs(600)).unwrap();
        assert!(!stale.exists());
        // At start-up, every file goes.
        std::fs::write(&stale, b"x").unwrap();
        FsBackend::open(dir.path(), &["b"]).unwrap();
        assert!(!stale.exists());
    }

    #[test]
    fn an_existing_directory_is_fsynced_into_its_parent_too() {
        fsynced();
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path();
        let target = base.join("a").join("b");
        create_dirs_durable(base, &target, &Default::default()).unwrap();
        assert_eq!(fsynced(), [base.to_path_buf(), base.join("a")]);
        // A second writer finds both directories there (the first creator may not have
        // finished its fsync yet) and still makes each entry durable before returning.
        create_dirs_durable(base, &target, &Default::default()).unwrap();
        assert_eq!(fsynced(), [base.to_path_buf(), base.join("a")]);
        // Concurrent creators: each returns only after every entry on its path was fsynced.
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (base, target) = (base.to_path_buf(), base.join("c").join("d"));
                std::thread::spawn(move || {
                    create_dirs_durable(&base, &target, &Default::default()).unwrap();
                    fsynced()
                })
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), [base.to_path_buf(), base.join("c")]);
        }
    }

    fn body(b: &'static [u8]) -> ByteStream {
        Box::pin(futures::stream::iter([Ok(Bytes::from_static(b))]))
    }

    async fn read_all(stream: ByteStream) -> Vec<u8> {
        stream.map(|c| c.unwrap().to_vec()).concat().await
    }

    #[tokio::test]
    async fn staged_bodies_are_invisible_until_committed() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
        let meta = ObjectMeta {
            content_type: Some("text/plain".into()),
            user_meta: [("owner".to_string(), "a".to_string())].into(),
            token: Some(7),
            headers: [("cache-control".to_string(), "no-store".to_string())].into(),
        };
        let staged = fs
            .stage("b", "x/y", meta.clone(), body(b"hello"))
            .await
            .unwrap();
        assert_eq!(staged.etag, "\"5d41402abc4b2a76b9719d911017c592\"");
        assert!(fs.head("b", "x/y").await.unwrap().is_none());
        let info = fs.commit(&staged, None).await.unwrap();
        assert_eq!(info.meta, meta);
        assert_eq!(info.size, 5);
        let (got, stream) = fs.get("b", "x/y").await.unwrap().unwrap();
        assert_eq!(got, info);
        assert_eq!(read_all(stream).await, b"hello");
        assert!(std::fs::read_dir(fs.staging_dir())
            .unwrap()
            .next()
            .is_none());
    }

    #[tokio::test]
    async fn commit_and_delete_are_conditional_on_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
        let first = fs
            .stage("b", "k", ObjectMeta::default(), body(b"1"))
            .await
            .unwrap();
        let v1 = fs.commit(&first, None).await.unwrap();
        // A second writer that believes the object is absent loses, and leaves nothing.
        let staged = fs
            .stage("b", "k", ObjectMeta::default(), body(b"2"))
            .await
            .unwrap();
        let err = fs.commit(&staged, None).await.unwrap_err();
        assert!(matches!(err, BackendError::Conflict { .. }));
        fs.discard(staged).await;
        assert!(std::fs::read_dir(fs.staging_dir())
            .unwrap()
            .next()
            .is_none());
        // An edit in place changes the version.
        std::fs::write(fs.object_file("b", "k"), b"edited").unwrap();
        let staged = fs
            .stage("b", "k", ObjectMeta::default(), body(b"3"))
            .await
            .unwrap();
        assert!(fs.commit(&staged, Some(&v1.version)).await.is_err());
        assert!(fs.delete("b", "k", &v1.version).await.is_err());
        assert!(fs.object_file("b", "k").exists());
    }

    /// The version a commit records is the one the published file has (the rename changed its
    /// ctime), and a rewrite in place that restores size and mtime still changes it.
    #[tokio::test]
    async fn an_in_place_rewrite_that_restores_the_mtime_is_a_new_version() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
        let staged = fs
            .stage("b", "k", ObjectMeta::default(), body(b"aaaa"))
            .await
            .unwrap();
        let info = fs.commit(&staged, None).await.unwrap();
        let now = fs.version("b", "k").await.unwrap();
        assert_eq!(now.as_deref(), Some(info.version.as_str()));
        // The pending intent (the staged version) is recognised as the published file.
        assert!(same_version(staged.version.as_deref(), now.as_deref()));

        let path = fs.object_file("b", "k");
        let before = std::fs::metadata(&path).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] = b'z';
        std::fs::write(&path, &bytes).unwrap();
        let mtime = filetime_of(before.mtime(), before.mtime_nsec());
        let f = std::fs::File::options().write(true).open(&path).unwrap();
        f.set_times(std::fs::FileTimes::new().set_modified(mtime))
            .unwrap();
        let after = std::fs::metadata(&path).unwrap();
        assert_eq!(
            (
                before.ino(),
                before.size(),
                before.mtime(),
                before.mtime_nsec()
            ),
            (after.ino(), after.size(), after.mtime(), after.mtime_nsec()),
            "the rewrite restored everything but the ctime"
        );
        let found = fs.version("b", "k").await.unwrap();
        assert!(!same_version(Some(&info.version), found.as_deref()));
        let staged = fs
            .stage("b", "k", ObjectMeta::default(), body(b"bbbb"))
            .await
            .unwrap();
        assert!(matches!(
            fs.commit(&staged, Some(&info.version)).await,
            Err(BackendError::Conflict { .. })
        ));
        assert!(fs.delete("b", "k", &info.version).await.is_err());
    }

    /// Rows written before versions carried the ctime still match the file they recorded.
    #[tokio::test]
    async fn a_version_recorded_without_the_ctime_still_matches() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
        let staged = fs
            .stage("b", "k", ObjectMeta::default(), body(b"1"))
            .await
            .unwrap();
        let info = fs.commit(&staged, None).await.unwrap();
        let (legacy, _) = info.version.split_once('~').unwrap();
        assert!(same_version(Some(legacy), Some(&info.version)));
        assert!(!same_version(Some(&info.version), Some(legacy)));
        let staged = fs
            .stage("b", "k", ObjectMeta::default(), body(b"2"))
            .await
            .unwrap();
        fs.commit(&staged, Some(legacy)).await.unwrap();
        let now = fs.version("b", "k").await.unwrap().unwrap();
        assert!(!same_version(Some(legacy), Some(&now)));
        fs.delete("b", "k", &now).await.unwrap();
    }

    fn filetime_of(secs: i64, nsec: i64) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + std::time::Duration::new(secs as u64, nsec as u32)
    }

    #[tokio::test]
    async fn a_foreign_file_is_reported_corrupt_not_served() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
        std::fs::write(fs.object_file("b", "k"), b"no trailer here").unwrap();
        assert!(matches!(
            fs.head("b", "k").await,
            Err(BackendError::Corrupt(_))
        ));
    }

    #[tokio::test]
    async fn listing_covers_nested_and_long_keys_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsBackend::open(dir.path(), &["b"]).unwrap();
        let long = format!("p/{}", "z".repeat(400));
        for key in ["p/b", "p", "p/a/c", long.as_str(), "q", "p//e"] {
            let staged = fs
                .stage("b", key, ObjectMeta::default(), body(b"v"))
                .await
                .unwrap();
            fs.commit(&staged, None).await.unwrap();
        }
        let page = fs.list("b", "p/", None, 100).await.unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["p//e", "p/a/c", "p/b", long.as_str()]);
        let page = fs.list("b", "", Some("p/a/c"), 2).await.unwrap();
        let keys: Vec<&str> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["p/b", long.as_str()]);
        assert_eq!(page.next_start_after.as_deref(), Some(long.as_str()));
    }
}
