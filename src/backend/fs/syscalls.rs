//! The file-system calls the fs backend's promises rest on: a directory fsynced, a rename that
//! never replaces, directories created durably, and blocking work off the async runtime.

use super::*;

/// `dir` fsynced, for [`dirsync::DirSyncs::sync`], which tells a directory that could not be
/// opened from a failed fsync.
pub(super) fn fsync_dir_shared(dir: &Path) -> Result<(), dirsync::SyncFailure> {
    #[cfg(test)]
    tests::FSYNCED.with(|f| f.borrow_mut().push(dir.to_path_buf()));
    let file = std::fs::File::open(dir).map_err(|e| {
        // Out of descriptors or memory passes; a directory that cannot be opened for any
        // other reason (permissions, say) never will be, and fails as a failed fsync does.
        if matches!(
            e.raw_os_error(),
            Some(libc::EMFILE | libc::ENFILE | libc::ENOMEM)
        ) {
            dirsync::SyncFailure::NotOpened(e)
        } else {
            dirsync::SyncFailure::Fsync(e)
        }
    })?;
    Ok(file.sync_all()?)
}

/// Fails (`what`) unless `path` is the file described by `ours`: the same inode. Not the
/// device: on overlayfs (kernels 4.12 to 4.18) a path's `lstat` and a handle's `fstat` report
/// different devices for one file, and a rename never leaves the file system anyway.
pub(super) fn same_file(
    path: &Path,
    ours: &std::fs::Metadata,
    what: &str,
) -> Result<(), BackendError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.ino() == ours.ino() => Ok(()),
        _ => Err(BackendError::Failing(what.to_string())),
    }
}

pub(super) fn fsync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(test)]
    tests::FSYNCED.with(|f| f.borrow_mut().push(dir.to_path_buf()));
    std::fs::File::open(dir)?.sync_all()
}

/// The file's current version, `None` if there is no file (or a file where a directory is).
/// Renames `from` to `to` unless `to` exists (renameat2 with RENAME_NOREPLACE, atomic);
/// false if it exists. On a filesystem without the flag, a check and a plain rename.
pub(super) fn rename_noreplace(from: &Path, to: &Path) -> std::io::Result<bool> {
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

pub(super) fn current_version(path: &Path) -> std::io::Result<Option<String>> {
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
pub(super) fn create_dirs_durable(
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
        dirsyncs.sync(&at, fsync_dir_shared)?;
        at = next;
    }
    Ok(())
}

pub(super) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, BackendError> + Send + 'static,
) -> Result<T, BackendError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| BackendError::Failing(format!("a file task failed: {e}")))?
}

pub(super) fn open_info(
    path: &Path,
    key: &str,
) -> Result<Option<(std::fs::File, ObjectInfo)>, BackendError> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory) => {
            return Ok(None)
        }
        Err(e) => return Err(e.into()),
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let info = read_info(&file, Some(key))?;
    Ok(Some((file, info)))
}
